"""A starved gateway blames its pods (issue 11): when every pod's scrape fails at once, the gateway
keeps routing on the last known state, says so in /ready and its metrics, and leaves ejection to
real request failures."""

from __future__ import annotations

import asyncio
import time
from typing import Any

from cluster_gateway.metrics.fetch import Fetcher
from cluster_gateway.pool import Endpoint
from tests.cluster_gateway.integration.conftest import chat, running, tiny

from .helpers import load, success_share, until


async def metrics_show(c: Any, line: str, within: float = 5.0) -> None:
    deadline = time.monotonic() + within
    while line not in (await c.get("/metrics")).text:
        assert time.monotonic() < deadline, f"/metrics never showed {line!r}"
        await asyncio.sleep(0.05)


class LateFetcher:
    """Every scrape answer arrives after the scrape timeout, as on a gateway whose own event loop
    lags (the pods are fine: requests to them still work)."""

    def __init__(self, inner: Fetcher, late_s: float) -> None:
        self.inner = inner
        self.late_s = late_s

    async def get(self, endpoint: Endpoint, path: str, channel: str) -> bytes:
        if path.startswith("/metrics"):  # filtered scrapes carry a query
            await asyncio.sleep(self.late_s)
        return await self.inner.get(endpoint, path, channel)

    def forget(self, name: str) -> None:
        self.inner.forget(name)

    async def aclose(self) -> None:
        await self.inner.aclose()


async def test_every_scrape_failing_at_once_keeps_routing_degraded() -> None:
    scrape = {"intervalMs": 50, "timeoutMs": 50, "staleAfterMisses": 2}
    async with running([tiny(), tiny(), tiny()], scrape=scrape) as (_fleet, gw, c):
        scraper: Any = gw.scraper
        scraper._fetcher = LateFetcher(scraper._fetcher, late_s=0.2)
        dead_after = 2
        await until(
            lambda: all(p.stale and p.consecutive_failures >= dead_after for p in gw.pool.pods()),
            10,
            "every scrape failing",
        )
        outs = await load(c, 60, stream=False, concurrency=4) + await load(c, 30, stream=True, concurrency=4)
        assert success_share(outs) == 1.0, [o for o in outs if not o.ok][:3]
        assert len({o.pod for o in outs}) >= 2  # spread over the pods on in-flight counts, not one
        assert gw.outliers.ejected() == []  # scrape timeouts alone eject nobody
        ready = await c.get("/ready")
        assert ready.status_code == 200
        assert ready.json()["degraded"] is True and ready.json()["readyPods"] == 0
        assert "fleetgate_gateway_degraded 1.0" in (await c.get("/metrics")).text
        scraper._fetcher = scraper._fetcher.inner  # the gateway recovers
        await until(lambda: not any(p.stale for p in gw.pool.pods()), 10, "fresh again")
        ready = await c.get("/ready")
        assert ready.json()["degraded"] is False and ready.json()["readyPods"] == 3
        await metrics_show(c, "fleetgate_gateway_degraded 0.0")  # a render is reused for up to 1 s


async def test_pods_that_really_died_are_ejected_by_their_requests_then_not_ready() -> None:
    scrape = {"intervalMs": 50, "timeoutMs": 100, "staleAfterMisses": 2}
    od = {"maxEjectionPercent": 100, "consecutiveGatewayFailures": 2}
    async with running([tiny(), tiny()], scrape=scrape, proxy={"outlierDetection": od}) as (fleet, gw, c):
        fleet.set_fault(0, "crash")
        fleet.set_fault(1, "crash")
        await until(lambda: all(p.stale for p in gw.pool.pods()), 10, "scrapes failing")
        assert (await c.get("/ready")).json()["degraded"] is True
        for _ in range(4):  # real requests fail (connection refused) and eject both
            r = await c.post("/v1/chat/completions", json=chat("x"))
            assert r.headers["content-type"] == "application/json"
        await until(lambda: len(gw.outliers.ejected()) == 2, 5, "both ejected")
        ready = await c.get("/ready")
        assert ready.status_code == 503 and ready.json()["degraded"] is False
