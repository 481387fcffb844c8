"""A draining router replica (SIGTERM: `GlobalRouter.drain`, docs/drain.md): `/ready` answers 503
`router_draining` while it still serves for `server.drainNoticeS`, then it accepts no new
connection, and a stream in flight at the signal runs to its end."""

from __future__ import annotations

import asyncio
import time

import httpx
import pytest

from tests.global_router.router_harness import harness, router_config

pytestmark = pytest.mark.timeout(60)

NOTICE_S = 2.0
STREAM = {
    "model": "meta-llama/Llama-3.1-8B-Instruct",
    "messages": [{"role": "user", "content": "a long one"}],
    "stream": True,
}


DROPPED = -1  # a probe whose connection was closed or reset unanswered


async def _probe(url: str) -> int | None:
    """`/ready` on a new connection: its status, None when the connection is refused, `DROPPED`
    when the kernel queued it just as the listener closed and it was dropped unanswered."""
    try:
        async with httpx.AsyncClient(timeout=5) as c:
            r = await c.get(f"{url}/ready")
    except httpx.ConnectError:
        return None
    except (httpx.RemoteProtocolError, httpx.ReadError):
        return DROPPED
    if r.status_code == 503:
        assert r.json()["error"]["code"] == "router_draining", r.text
    return r.status_code


async def test_drain_leaves_rotation_then_stops_accepting_and_the_stream_in_flight_finishes() -> None:
    cfg = router_config(server={"drainNoticeS": NOTICE_S, "drainTimeoutS": 20})
    async with harness(["a"], cfg) as h:
        h.gateways["a"].chunks = 600  # 10 ms apart: a stream of ~6 s, longer than the notice
        await h.publish("a")
        url = h.router.url
        assert await _probe(url) == 200
        async with h.client.stream("POST", "/v1/chat/completions", json=STREAM, headers=h.headers()) as r:
            assert r.status_code == 200
            lines = r.aiter_lines()
            first = await anext(lines)
            assert first.startswith("data: ")
            drain = asyncio.create_task(h.router.drain())
            seen: list[int | None] = []
            deadline = time.monotonic() + 10
            while (status := await _probe(url)) is not None:  # until refused
                seen.append(status)
                assert time.monotonic() < deadline, f"still accepting after 10 s: {seen[-5:]}"
                await asyncio.sleep(0.02)
            # 200s, then 503s for the notice, then (at the switch, at most) connections dropped unanswered
            assert 503 in seen, seen
            after = seen[seen.index(503) :]
            assert set(after) <= {503, DROPPED} and DROPPED not in seen[: seen.index(503)], seen
            assert not drain.done(), "the drain ended before the stream in flight did"
            rest = [line async for line in lines if line]
        assert rest[-1] == "data: [DONE]" and not any('"error"' in line for line in rest), rest[-3:]
        assert sum(line.startswith("data: {") for line in [first, *rest]) == 600
        await asyncio.wait_for(drain, 20)
