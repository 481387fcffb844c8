"""A tenant over its limit gets OpenAI-style 429s; two replicas together admit the limit, not twice it."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import httpx
import pytest

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
LIMITED = "sk-int-limited"
RPM = 120


async def test_two_replicas_share_the_request_limit(redis_server: RedisServer, tmp_path: Path) -> None:
    tenant = {"name": "limited", "apiKeySha256": [hash_key(LIMITED)], "requestsPerMinute": RPM}
    cfg = router_config(["c1"], redis_url=redis_server.url, tenants=[tenant])
    routers = [await start_router(cfg), await start_router(cfg)]
    cluster = await start_cluster("c1", tmp_path, routers[0].grpc_port, pods=2)
    try:
        for r in routers:
            await eventually(fresh_ready(r, ["c1"]), within=15, what="cluster fresh on both replicas")
        body = {"model": MODEL, "messages": [{"role": "user", "content": "x"}], "max_tokens": 2}
        statuses: list[int] = []
        refusals: list[httpx.Response] = []
        first_sent: list[float] = []
        last_sent = 0.0
        async with httpx.AsyncClient(timeout=30, limits=httpx.Limits(max_connections=64)) as client:

            async def worker(i: int) -> None:
                nonlocal last_sent
                for _ in range(20):
                    t = time.monotonic()
                    if not first_sent:
                        first_sent.append(t)
                    last_sent = max(last_sent, t)
                    r = await client.post(
                        f"{routers[i % 2].url}/v1/chat/completions",
                        json=body,
                        headers={"authorization": f"Bearer {LIMITED}"},
                    )
                    statuses.append(r.status_code)
                    if r.status_code == 429:
                        refusals.append(r)

            await asyncio.gather(*(worker(i) for i in range(16)))
        admitted = statuses.count(200)
        assert admitted + len(refusals) == len(statuses) == 320
        budget = RPM + RPM / 60.0 * (last_sent - first_sent[0])  # burst + GCRA refill over the run
        assert admitted <= budget + 1, (admitted, budget)
        assert abs(admitted - budget) <= max(1.0, 0.01 * budget) + 1, (admitted, budget)
        r = refusals[-1]
        err = r.json()["error"]
        assert err["code"] == "rate_limit_exceeded" and err["type"] == "rate_limit_error"
        assert r.headers["x-ratelimit-limit-requests"] == str(RPM)
        assert r.headers["x-ratelimit-remaining-requests"] == "0"
        assert int(r.headers["retry-after"]) >= 1
        assert r.headers["x-ratelimit-reset-requests"].endswith("s")
    finally:
        await cluster.stop()
        for r in routers:
            await r.stop()
