"""Open-loop replay of a trace against an OpenAI-compatible endpoint, measuring TTFT from the
client's side (first streamed content chunk), end-to-end latency, tokens and errors."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass

import httpx
import msgspec

from bench.trace import TraceRequest


@dataclass(slots=True)
class Result:
    at_s: float
    kind: str
    model: str
    status: int
    ttft_s: float | None
    e2e_s: float
    output_tokens: int
    error: str = ""

    @property
    def ok(self) -> bool:
        return self.status == 200 and not self.error


def _usage_tokens(payload: bytes) -> int | None:
    try:
        obj = msgspec.json.decode(payload)
    except msgspec.DecodeError:
        return None
    usage = obj.get("usage") if isinstance(obj, dict) else None
    if isinstance(usage, dict) and isinstance(usage.get("completion_tokens"), int):
        return int(usage["completion_tokens"])
    return None


async def _unary(
    client: httpx.AsyncClient, url: str, req: TraceRequest, headers: Mapping[str, str], start: float
) -> Result:
    try:
        resp = await client.post(url, json=req.body(), headers=dict(headers))
    except httpx.HTTPError as exc:
        return Result(
            req.at_s,
            req.kind,
            req.model,
            0,
            None,
            time.perf_counter() - start,
            0,
            f"{type(exc).__name__}: {exc}"[:200],
        )
    e2e = time.perf_counter() - start
    if resp.status_code != 200:
        return Result(req.at_s, req.kind, req.model, resp.status_code, None, e2e, 0, resp.text[:200])
    return Result(req.at_s, req.kind, req.model, 200, None, e2e, _usage_tokens(resp.content) or 0)


async def one_request(
    client: httpx.AsyncClient, url: str, req: TraceRequest, headers: Mapping[str, str], t0: float
) -> Result:
    start = time.perf_counter()
    ttft: float | None = None
    tokens = 0
    usage_tokens: int | None = None
    if not req.stream:
        return await _unary(client, url, req, headers, start)
    try:
        async with client.stream("POST", url, json=req.body(), headers=dict(headers)) as resp:
            if resp.status_code != 200:
                body = await resp.aread()
                return Result(
                    req.at_s,
                    req.kind,
                    req.model,
                    resp.status_code,
                    None,
                    time.perf_counter() - start,
                    0,
                    body[:200].decode(errors="replace"),
                )
            buf = b""
            async for chunk in resp.aiter_bytes():
                buf += chunk
                while b"\n\n" in buf:
                    event, buf = buf.split(b"\n\n", 1)
                    if not event.startswith(b"data: "):
                        continue
                    data = event[6:]
                    if data == b"[DONE]":
                        continue
                    if b'"error"' in data[:20]:
                        return Result(
                            req.at_s,
                            req.kind,
                            req.model,
                            502,
                            ttft,
                            time.perf_counter() - start,
                            tokens,
                            data[:200].decode(errors="replace"),
                        )
                    if b'"content"' in data or b'"text"' in data:
                        if ttft is None:
                            ttft = time.perf_counter() - start
                        tokens += 1
                    if b'"usage"' in data:
                        usage_tokens = _usage_tokens(data) or usage_tokens
    except httpx.HTTPError as exc:
        return Result(
            req.at_s,
            req.kind,
            req.model,
            0,
            ttft,
            time.perf_counter() - start,
            tokens,
            f"{type(exc).__name__}: {exc}"[:200],
        )
    return Result(
        req.at_s,
        req.kind,
        req.model,
        200,
        ttft,
        time.perf_counter() - start,
        usage_tokens if usage_tokens is not None else tokens,
    )


async def replay(
    base_url: str,
    trace: list[TraceRequest],
    *,
    headers: Mapping[str, str] | None = None,
    headers_for: Callable[[TraceRequest], Mapping[str, str]] | None = None,
    timeout_s: float = 300.0,
    progress: Callable[[int, int], None] | None = None,
) -> list[Result]:
    """Send each request at its arrival time (open loop: slow answers never delay arrivals)."""
    url = base_url.rstrip("/") + "/v1/chat/completions"
    limits = httpx.Limits(max_connections=4096, max_keepalive_connections=512)
    results: list[Result] = []
    async with httpx.AsyncClient(timeout=httpx.Timeout(timeout_s, connect=10.0), limits=limits) as client:
        t0 = time.perf_counter()
        tasks: list[asyncio.Task[Result]] = []
        for req in trace:
            delay = req.at_s - (time.perf_counter() - t0)
            if delay > 0:
                await asyncio.sleep(delay)
            h = dict(headers or {})
            if headers_for is not None:
                h.update(headers_for(req))
            tasks.append(asyncio.create_task(one_request(client, url, req, h, t0)))
        for done, fut in enumerate(asyncio.as_completed(tasks), start=1):
            results.append(await fut)
            if progress is not None:
                progress(done, len(tasks))
    results.sort(key=lambda r: r.at_s)
    return results
