"""Every agent falls silent (gateways still up): the router keeps routing on the last reports, and a
cluster that really dies is still ejected after `ejectAfterFailures` failed attempts."""

from __future__ import annotations

import asyncio
from pathlib import Path

import httpx
import pytest

from tests.eventually import eventually
from tests.global_router.integration.fleet_harness import (
    ADMIN_KEY,
    KEY,
    MODEL,
    SimCluster,
    fresh_ready,
    router_config,
    start_cluster,
    start_router,
)

pytestmark = pytest.mark.timeout(90)


async def _stop_agent(cluster: SimCluster) -> None:
    """Silence the cluster's capacity agent only: its gateway and pods keep serving."""
    tasks = [t for t in cluster.gateway._tasks if t.get_name() == "gateway-capacity-agent"]
    assert tasks, "the gateway runs no capacity agent"
    for t in tasks:
        t.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)


async def test_silent_agents_do_not_stop_traffic_but_a_dead_cluster_is_ejected(tmp_path: Path) -> None:
    router = await start_router(router_config(["a", "b"]))  # staleAfterS 1.5, ejectAfterFailures 2
    a = await start_cluster("a", tmp_path, router.grpc_port, pods=1)
    b = await start_cluster("b", tmp_path, router.grpc_port, pods=1)
    body = {"model": MODEL, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 2}
    hdrs = {"authorization": f"Bearer {KEY}"}
    try:
        await eventually(fresh_ready(router, ["a", "b"]), within=15, what="both clusters fresh")
        await _stop_agent(a)
        await _stop_agent(b)
        await eventually(
            lambda: not any(router.selector.is_fresh(c) for c in router.fleet.snapshot()),
            within=20,
            what="both reports stale",
        )
        async with httpx.AsyncClient(timeout=30) as client:
            statuses = [
                (await client.post(f"{router.url}/v1/chat/completions", json=body, headers=hdrs)).status_code
                for _ in range(20)
            ]
            assert statuses == [200] * 20
            admin = {"authorization": f"Bearer {ADMIN_KEY}"}  # /fleet is private (docs/security.md)
            fleet = (await client.get(f"{router.url}/fleet", headers=admin)).json()
            assert {c["id"]: c["stale"] for c in fleet["clusters"]} == {"a": True, "b": True}
            assert (await client.get(f"{router.url}/ready")).status_code == 200

            await b.kill()  # now b is really down; its (stale) report still lists it
            served = []
            for _ in range(40):  # b ranks first on about half of them (equal scores, random ties)
                r = await client.post(f"{router.url}/v1/chat/completions", json=body, headers=hdrs)
                assert r.status_code == 200  # failover within the request
                served.append(r.headers["x-fleetgate-cluster"])
                if router.health.is_ejected("b"):
                    break
            assert set(served) == {"a"}
            assert router.health.is_ejected("b")
            # ejected on its first failures: two failed attempts (ejectAfterFailures), not more
            failed_on_b = sum(
                v
                for m in router.metrics.failovers.collect()
                for smp in m.samples
                if smp.name.endswith("_total") and smp.labels["from_cluster"] == "b"
                for v in [smp.value]
            )
            assert failed_on_b == 2
    finally:
        await a.stop()
        await b.sims.stop()
        await router.stop()
