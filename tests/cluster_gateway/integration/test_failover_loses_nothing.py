"""Dead or failing pods: requests move to another pod before the client sees anything."""

from __future__ import annotations

import asyncio
import collections

from .conftest import chat, freeze_scrapes, running, served_requests, tiny


async def test_connection_refused_is_retried_on_the_next_pod_and_nothing_is_lost() -> None:
    # Slow scrapes: the pool still believes the crashed pod is healthy, so the picker chooses it.
    slow = {"intervalMs": 5000, "maxStalenessMs": 20000}
    async with running([tiny(), tiny(), tiny()], scrape=slow) as (fleet, gw, c):
        freeze_scrapes(gw)
        dead = fleet.urls[0]
        for other in fleet.urls[1:]:  # make the doomed pod the best-ranked choice
            for _ in range(4):
                gw.pool.acquire(other)
        fleet.set_fault(0, "crash")  # stops listening: connection refused
        burst = await asyncio.gather(*(c.post("/v1/chat/completions", json=chat(f"b{i}")) for i in range(12)))
        assert [r.status_code for r in burst] == [200] * 12
        assert dead not in {r.headers["x-fleetgate-pod"] for r in burst}
        metrics = (await c.get("/metrics")).text
        retried = [
            ln
            for ln in metrics.splitlines()
            if ln.startswith('fleetgate_gateway_retries_total{reason="connect"}')
        ]
        assert retried and float(retried[0].split()[-1]) >= 1, retried
        assert served_requests(fleet, 1) + served_requests(fleet, 2) == 12  # nothing lost, nothing doubled
        # Right after, the pick still prefers the dead pod (no scrape yet), but the proxy tries it
        # last: no further connection attempts are wasted on it.
        again = [await c.post("/v1/chat/completions", json=chat(f"c{i}")) for i in range(6)]
        assert [r.status_code for r in again] == [200] * 6
        metrics = (await c.get("/metrics")).text
        after = [
            ln
            for ln in metrics.splitlines()
            if ln.startswith('fleetgate_gateway_retries_total{reason="connect"}')
        ]
        assert after == retried
        pod = gw.pool.get(dead)
        assert pod is not None and pod.inflight == 0  # every attempt released its slot


async def test_a_dead_pod_is_avoided_within_one_scrape_interval() -> None:
    async with running([tiny(), tiny(), tiny()], scrape={"intervalMs": 50, "staleAfterMisses": 1}) as (
        fleet,
        gw,
        c,
    ):
        dead = fleet.urls[0]
        fleet.set_fault(0, "crash")
        t0 = asyncio.get_running_loop().time()
        for _ in range(100):
            pod = gw.pool.get(dead)
            if pod is not None and pod.stale:
                break
            await asyncio.sleep(0.01)
        else:
            raise AssertionError("dead pod never marked stale")
        # One 50 ms interval plus the 500 ms connect/scrape budget; generous for a contended CPU.
        assert asyncio.get_running_loop().time() - t0 < 1.0
        rs = await asyncio.gather(*(c.post("/v1/chat/completions", json=chat(f"a{i}")) for i in range(12)))
        assert [r.status_code for r in rs] == [200] * 12
        assert dead not in {r.headers["x-fleetgate-pod"] for r in rs}
        metrics = (await c.get("/metrics")).text
        assert "fleetgate_gateway_stale_pods 1.0" in metrics


async def test_a_5xx_or_429_before_the_first_byte_is_retried_on_another_pod() -> None:
    async with running([tiny(), tiny()]) as (fleet, _gw, c):
        fleet.set_fault(0, "error", rate=1.0, status=503)
        fleet.set_fault(1, "none")
        rs = [await c.post("/v1/chat/completions", json=chat(f"e{i}")) for i in range(8)]
        assert [r.status_code for r in rs] == [200] * 8
        assert {r.headers["x-fleetgate-pod"] for r in rs} == {fleet.urls[1]}
        fleet.set_fault(0, "429", rate=1.0)
        rs = [await c.post("/v1/chat/completions", json=chat(f"t{i}")) for i in range(4)]
        assert [r.status_code for r in rs] == [200] * 4


async def test_when_every_pod_fails_the_client_gets_the_pod_error_not_a_hang() -> None:
    async with running([tiny(), tiny()]) as (fleet, _gw, c):
        fleet.set_fault(0, "error", rate=1.0, status=500)
        fleet.set_fault(1, "error", rate=1.0, status=500)
        r = await c.post("/v1/chat/completions", json=chat("x"))
        assert r.status_code == 500  # one retry, then the pod's own error passes through
        assert "error" in r.json()
        fleet.set_fault(0, "crash")
        fleet.set_fault(1, "crash")
        r = await c.post("/v1/chat/completions", json=chat("y"))
        assert r.status_code == 503
        assert r.json()["error"]["code"] in {"upstream_unavailable", "no_healthy_endpoint"}


async def test_client_headers_cannot_choose_the_pod() -> None:
    async with running([tiny(), tiny(), tiny()]) as (fleet, gw, c):
        target = fleet.urls[0]
        hostport = target.removeprefix("http://")
        # Make pod 0 the worst choice, then ask for it by every internal header there is.
        gw.pool.acquire(target)
        for _ in range(20):
            gw.pool.acquire(target)
        spoof = {
            "x-gateway-destination-endpoint": hostport,
            "x-fleetgate-pod": target,
            "x-fleetgate-cluster": "elsewhere",
        }
        before = served_requests(fleet, 0)
        rs = [await c.post("/v1/chat/completions", json=chat(f"s{i}"), headers=spoof) for i in range(10)]
        assert all(r.status_code == 200 for r in rs)
        counts = collections.Counter(r.headers["x-fleetgate-pod"] for r in rs)
        assert target not in counts, counts
        assert served_requests(fleet, 0) == before
