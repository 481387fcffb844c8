"""The ack deadline (`failover.ackTimeoutS`): a gateway that accepts connections but answers nothing
(a black-holed path) costs a request seconds, not `firstByteTimeoutS`, and is ejected; a gateway that
is merely slow to answer acknowledges at once (its interim 100 Continue) and keeps the request."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from tests.global_router.router_harness import harness, router_config

CHAT = {"model": "meta-llama/Llama-3.1-8B-Instruct", "messages": [{"role": "user", "content": "hi"}]}


@asynccontextmanager
async def black_hole() -> AsyncIterator[tuple[str, list[bytes]]]:
    """A TCP server that accepts and reads, and never writes a byte (packets vanish on the way back)."""
    received: list[bytes] = []
    writers: list[asyncio.StreamWriter] = []

    async def swallow(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        writers.append(writer)
        while data := await reader.read(65536):
            received.append(data)
        writer.close()

    server = await asyncio.start_server(swallow, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    try:
        yield f"http://127.0.0.1:{port}", received
    finally:
        for w in writers:  # the handlers parked in read() see EOF and end
            w.transport.abort()
        server.close()
        await server.wait_closed()


def _cfg(ack_s: float) -> object:
    return router_config(
        failover={"ackTimeoutS": ack_s, "firstByteTimeoutS": 60, "ejectAfterFailures": 3, "ejectBaseS": 30}
    )


async def test_a_black_holed_gateway_fails_over_within_the_ack_deadline_and_is_ejected() -> None:
    async with black_hole() as (hole_url, received), harness(["b"], _cfg(0.3)) as h:  # type: ignore[arg-type]
        await h.publish("hole", url=hole_url, headroom=50, ttft_ms=50)  # ranked first
        await h.publish("b", headroom=5, ttft_ms=400)
        for stream in (False, True):
            t0 = time.monotonic()
            r = await h.client.post(
                "/v1/chat/completions", json={**CHAT, "stream": stream}, headers=h.headers()
            )
            assert r.status_code == 200 and r.headers["x-fleetgate-cluster"] == "b"
            assert time.monotonic() - t0 < 5.0  # the ack deadline, far from firstByteTimeoutS (60 s)
        # one unacknowledged request ejected it (not ejectAfterFailures = 3): the stream went to b
        # without paying the deadline again, and the hole saw the first request only
        assert h.router.health.is_ejected("hole")
        assert sum(d.count(b"POST ") for d in received) == 1
        assert b"expect: 100-continue" in b"".join(received)


async def test_a_slow_gateway_acknowledges_at_once_and_keeps_the_request() -> None:
    async with harness(["slow", "b"], _cfg(0.2)) as h:  # type: ignore[arg-type]
        h.gateways["slow"].delay_s = 1.0  # its answer takes 5x the ack deadline
        await h.publish("slow", headroom=50, ttft_ms=50)
        await h.publish("b", headroom=5, ttft_ms=400)
        for stream in (False, True):
            r = await h.client.post(
                "/v1/chat/completions", json={**CHAT, "stream": stream}, headers=h.headers()
            )
            assert r.status_code == 200 and r.headers["x-fleetgate-cluster"] == "slow"
        assert not h.router.health.is_ejected("slow") and not h.gateways["b"].requests
        assert h.gateways["slow"].requests[0].get("expect") == "100-continue"


async def test_ack_timeout_zero_turns_the_deadline_off() -> None:
    async with harness(["a"], _cfg(0.0)) as h:  # type: ignore[arg-type]
        await h.publish("a")
        r = await h.client.post("/v1/chat/completions", json=CHAT, headers=h.headers())
        assert r.status_code == 200 and "expect" not in h.gateways["a"].requests[0]
