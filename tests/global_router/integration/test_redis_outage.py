"""Redis dies mid-run: `failMode: open` keeps serving on its share of the last known budget, `closed`
refuses."""

from __future__ import annotations

from pathlib import Path

import httpx
import pytest

from global_router.ratelimit import RedisLimiter
from global_router.tenants import hash_key
from tests.eventually import eventually
from tests.global_router.integration.fleet_harness import (
    MODEL,
    fresh_ready,
    router_config,
    start_cluster,
    start_router,
)
from tests.procs import RedisServer

pytestmark = pytest.mark.timeout(90)
LIMITED = "sk-int-outage"


async def test_redis_killed_mid_run_follows_the_fail_mode(redis_server: RedisServer, tmp_path: Path) -> None:
    tenant = {"name": "outage", "apiKeySha256": [hash_key(LIMITED)], "requestsPerMinute": 40}
    open_router = await start_router(router_config(["c1"], redis_url=redis_server.url, tenants=[tenant]))
    closed_router = await start_router(
        router_config(["c1"], redis_url=redis_server.url, tenants=[tenant], fail_mode="closed")
    )
    cluster = await start_cluster("c1", tmp_path, open_router.grpc_port, pods=1)
    body = {"model": MODEL, "messages": [{"role": "user", "content": "x"}], "max_tokens": 2}
    hdrs = {"authorization": f"Bearer {LIMITED}"}
    try:
        for r in (open_router, closed_router):
            await eventually(fresh_ready(r, ["c1"]), within=15, what="cluster fresh")
        limiter = open_router.limiter
        assert isinstance(limiter, RedisLimiter)
        # replicas announce themselves every replicaTtlS / 3: the open one learns it has a peer
        await eventually(lambda: limiter.replicas.live == 2, within=15, what="two replicas announced")
        async with httpx.AsyncClient(timeout=30) as client:
            for r in (open_router, closed_router):
                resp = await client.post(f"{r.url}/v1/chat/completions", json=body, headers=hdrs)
                assert resp.status_code == 200
            redis_server.proc.kill()
            redis_server.proc.wait(timeout=5)

            resp = await client.post(f"{closed_router.url}/v1/chat/completions", json=body, headers=hdrs)
            assert resp.status_code == 503 and resp.json()["error"]["code"] == "rate_limiter_unavailable"

            statuses = [
                (
                    await client.post(f"{open_router.url}/v1/chat/completions", json=body, headers=hdrs)
                ).status_code
                for _ in range(30)
            ]
            # the open replica last saw 39 of 40 left; two replicas announced themselves, so its
            # fallback goes on with half of that (one more if GCRA refilled on a slow machine)
            assert statuses.count(200) in (19, 20), statuses
            assert set(statuses) == {200, 429}
            health = (await client.get(f"{open_router.url}/health")).json()
            assert health["rate_limiter"] == "fallback-open"
    finally:
        await cluster.stop()
        await open_router.stop()
        await closed_router.stop()
