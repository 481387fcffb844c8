"""Many concurrent streams through one router replica complete intact (bounded: 400 streams)."""

from __future__ import annotations

import asyncio
from collections import Counter

import httpx
import pytest

from tests.global_router.fleet_fixtures import MODEL
from tests.global_router.router_harness import harness

pytestmark = pytest.mark.timeout(120)


async def test_hundreds_of_concurrent_streams_all_complete() -> None:
    body = {"model": MODEL, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 5, "stream": True}
    async with harness(["a", "b"]) as h:
        await h.publish("a", headroom=5000)
        await h.publish("b", headroom=5000)
        clients = [
            httpx.AsyncClient(base_url=h.router.url, timeout=60, limits=httpx.Limits(max_connections=50))
            for _ in range(8)
        ]
        outcomes: Counter[tuple[int, bool]] = Counter()
        served: Counter[str] = Counter()

        async def one(i: int) -> None:
            async with clients[i % 8].stream(
                "POST", "/v1/chat/completions", json=body, headers=h.headers()
            ) as r:
                data = b"".join([c async for c in r.aiter_raw()])
                outcomes[(r.status_code, data.endswith(b"data: [DONE]\n\n"))] += 1
                served[r.headers.get("x-fleetgate-cluster", "-")] += 1

        try:
            await asyncio.gather(*(one(i) for i in range(400)))
        finally:
            for c in clients:
                await c.aclose()
        assert outcomes == Counter({(200, True): 400})
        assert served["a"] > 100 and served["b"] > 100
        assert h.router.tracker.inflight("a") == h.router.tracker.inflight("b") == 0
