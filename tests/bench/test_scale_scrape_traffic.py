"""The scrape bench's pod under traffic: a vLLM-shaped streamed completion, and the A/B pair arithmetic."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest

from bench import scale_scrape
from bench.promtext_bench import vllm_registry
from bench.scale_scrape import _Window, pair_stats


async def _post(app: Any, path: str, body: dict[str, Any]) -> tuple[int, bytes]:
    sent: list[dict[str, Any]] = []
    delivered = asyncio.Event()
    done = asyncio.Event()

    async def receive() -> dict[str, Any]:
        if not delivered.is_set():
            delivered.set()
            return {"type": "http.request", "body": json.dumps(body).encode(), "more_body": False}
        await done.wait()  # no disconnect while the response streams
        return {"type": "http.disconnect"}

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    scope = {
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "method": "POST",
        "scheme": "http",
        "path": path,
        "raw_path": path.encode(),
        "root_path": "",
        "query_string": b"",
        "headers": [(b"host", b"pod"), (b"content-type", b"application/json")],
        "client": ("127.0.0.1", 1),
        "server": ("127.0.0.1", 8000),
    }
    try:
        await asyncio.wait_for(app(scope, receive, send), 10)
    finally:
        done.set()
    body_bytes = b"".join(m.get("body", b"") for m in sent if m["type"] == "http.response.body")
    return sent[0]["status"], body_bytes


async def test_the_completions_route_streams_like_vllm_and_records_the_request() -> None:
    pytest.importorskip("fastapi")
    pytest.importorskip("prometheus_fastapi_instrumentator")
    registry = vllm_registry()
    app, exact = scale_scrape._vllm_api_server(registry, completions=True)
    assert exact
    before = registry.get_sample_value(
        "vllm:generation_tokens_total", {"model_name": "meta-llama/Llama-3.1-8B-Instruct", "engine": "0"}
    )
    status, body = await _post(app, "/v1/completions", {"prompt": "a b c", "max_tokens": 3, "stream": True})
    assert status == 200
    events = [e for e in body.split(b"\n\n") if e]
    assert events[-1] == b"data: [DONE]"
    chunks = [json.loads(e.removeprefix(b"data: ")) for e in events[:-1]]
    assert len(chunks) == 3 and chunks[-1]["choices"][0]["finish_reason"] == "length"
    assert all(150 < len(e) < 600 for e in events[:-1])  # a few hundred bytes, as vLLM's
    after = registry.get_sample_value(
        "vllm:generation_tokens_total", {"model_name": "meta-llama/Llama-3.1-8B-Instruct", "engine": "0"}
    )
    assert before is not None and after == before + 3


def test_pair_differences_are_per_round_and_the_interval_covers_them() -> None:
    a = [
        _Window(0.10, 2.0, 0, 10, 500, 0),
        _Window(0.12, 2.0, 0, 10, 500, 0),
        _Window(0.10, 2.0, 0, 10, 500, 0),
    ]
    b = [
        _Window(0.12, 2.0, 20, 10, 500, 0),
        _Window(0.14, 2.0, 20, 10, 500, 0),
        _Window(0.13, 2.0, 20, 10, 500, 0),
    ]
    st = pair_stats(a, b)
    assert st.diffs == pytest.approx([0.01, 0.01, 0.015])
    assert st.median == pytest.approx(0.01) and st.scrapes_per_s == pytest.approx(10.0)
    mean, half = st.ci95()
    assert mean == pytest.approx(0.011667, rel=1e-3) and mean - half < 0.01 < mean + half
