"""A vLLM-shaped completions route and a bounded load client, for the scrape bench's pod under traffic.

Why: one gateway's fast-interval scrapes land on pods that are serving requests (the adaptive
cadence slows down idle, unchanged pods), so the pod-side cost that matters is the *marginal* CPU
the scrapes add to an API server that is already busy streaming tokens, with its caches warm.
`add_completion_routes` gives the bench's vLLM API-server wiring (`scale_scrape._vllm_api_server`)
what vLLM's API server does per request in its own process: a FastAPI handler that reads the JSON
body and answers a `StreamingResponse` of SSE chunks (`data: {...}\\n\\n`, ~300 bytes each, one every
`token_interval_s`, then `data: [DONE]`), through the same CORS and instrumentator middleware the
scrapes cross, recording the request in vLLM's metric set (running gauge, token counters, latency
histogram), so the filtered body changes between scrapes as a live pod's does. No model runs:
vLLM's engine core is another process, whose CPU a scrape never touches.

No `from __future__ import annotations` here: FastAPI reads the handlers' annotations at run
time, and `Request` is imported inside `add_completion_routes` (fastapi is the `bench` extra).

`drive` is the load client: `streams` connections each kept busy with one streamed completion
after another (closed loop, the streams' starts staggered so that every window of the bench sees
the same request rate), in its own process so its CPU is not the API server's.
"""

import asyncio
import json
import time
from collections.abc import AsyncIterator
from typing import Any

from bench import rawclient

__all__ = ["MODEL", "add_completion_routes", "completion_request", "drive"]

MODEL = "meta-llama/Llama-3.1-8B-Instruct"  # vllm_registry's model_name label
_LABELS = {"model_name": MODEL, "engine": "0"}


def _collector(registry: Any, name: str) -> Any:
    return registry._names_to_collectors[name]  # the bench's own registry


def add_completion_routes(app: Any, registry: Any, token_interval_s: float = 0.02) -> None:
    """`POST /v1/completions` (streaming or not) and `GET /v1/models` on a FastAPI `app`, shaped
    like vLLM's (`vllm/entrypoints/openai/api_server.py`), recording into `registry` (vllm_registry)."""
    from fastapi import Request
    from fastapi.responses import JSONResponse, StreamingResponse

    running = _collector(registry, "vllm:num_requests_running").labels(**_LABELS)
    prompt = _collector(registry, "vllm:prompt_tokens_total").labels(**_LABELS)
    generated = _collector(registry, "vllm:generation_tokens_total").labels(**_LABELS)
    e2e = _collector(registry, "vllm:e2e_request_latency_seconds").labels(**_LABELS)
    success = _collector(registry, "vllm:request_success_total").labels(**_LABELS, finished_reason="length")
    serial = iter(range(1 << 62))

    def chunk(rid: str, created: int, i: int, last: bool) -> bytes:
        choice = {
            "index": 0,
            "text": f" token{i}",
            "logprobs": None,
            "finish_reason": "length" if last else None,
            "stop_reason": None,
        }
        body = {
            "id": rid,
            "object": "text_completion",
            "created": created,
            "model": MODEL,
            "choices": [choice],
            "usage": None,
        }
        return b"data: " + json.dumps(body).encode() + b"\n\n"

    async def tokens(rid: str, n: int, t0: float) -> AsyncIterator[bytes]:
        created = int(time.time())
        try:
            for i in range(n):
                await asyncio.sleep(token_interval_s)
                generated.inc()
                yield chunk(rid, created, i, i == n - 1)
            yield b"data: [DONE]\n\n"
            success.inc()
        finally:
            running.dec()
            e2e.observe(time.perf_counter() - t0)

    @app.post("/v1/completions")
    async def create_completion(raw_request: Request) -> Any:
        t0 = time.perf_counter()
        body = await raw_request.json()
        n = int(body.get("max_tokens", 16))
        prompt.inc(len(str(body.get("prompt", "")).split()))
        running.inc()
        rid = f"cmpl-{next(serial):032x}"
        if body.get("stream"):
            return StreamingResponse(tokens(rid, n, t0), media_type="text/event-stream")
        try:
            await asyncio.sleep(token_interval_s * n)
            generated.inc(n)
            success.inc()
            text = "".join(f" token{i}" for i in range(n))
            choice = {"index": 0, "text": text, "logprobs": None, "finish_reason": "length"}
            usage = {"prompt_tokens": 8, "completion_tokens": n, "total_tokens": 8 + n}
            return JSONResponse(
                {"id": rid, "object": "text_completion", "model": MODEL, "choices": [choice], "usage": usage}
            )
        finally:
            running.dec()
            e2e.observe(time.perf_counter() - t0)

    @app.get("/v1/models")
    async def show_available_models() -> Any:
        card = {"id": MODEL, "object": "model", "owned_by": "vllm", "root": MODEL, "parent": None}
        return JSONResponse({"object": "list", "data": [card]})


def completion_request(port: int, tokens: int) -> bytes:
    body = {"model": MODEL, "prompt": "Say something about fleets " * 8, "max_tokens": tokens, "stream": True}
    return rawclient.build_request("127.0.0.1", port, "/v1/completions", body)


async def _drive(port: int, streams: int, tokens: int, counts: Any, stop: Any) -> None:
    raw = completion_request(port, tokens)

    async def one(i: int) -> None:
        await asyncio.sleep(i * tokens * 0.02 / streams)  # staggered: starts spread evenly in time
        conn: Any = None
        while not stop.is_set():
            if conn is None or conn.closed or not conn.keep_alive:
                if conn is not None:
                    conn.close()
                conn = await rawclient.connect("127.0.0.1", port, 10.0)
                conn.keep_alive = True
            out = await conn.send(raw, 30.0)
            with counts.get_lock():
                counts[0] += 1
                counts[1] += out.events
                counts[2] += bool(out.error or not out.done)
        if conn is not None:
            conn.close()

    await asyncio.gather(*(one(i) for i in range(streams)))


def drive(port: int, streams: int, tokens: int, counts: Any, stop: Any) -> None:
    """Process target: `streams` back-to-back streamed completions of `tokens` chunks until `stop`
    is set; `counts` (a shared array) holds [requests, SSE events, failed requests]."""
    from common import runloop

    runloop.run(_drive(port, streams, tokens, counts, stop), gc_policy=False)
