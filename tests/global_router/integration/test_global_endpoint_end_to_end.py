"""Two real clusters, two router replicas sharing Redis: spreading, draining, the openai client."""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import AsyncIterator
from pathlib import Path

import httpx
import openai
import pytest

from tests.eventually import eventually
from tests.global_router.integration.fleet_harness import (
    KEY,
    MODEL,
    SimCluster,
    fresh_ready,
    router_config,
    start_cluster,
    start_router,
)
from tests.procs import RedisServer

pytestmark = pytest.mark.timeout(90)


@pytest.fixture
async def fleet(redis_server: RedisServer, tmp_path: Path) -> AsyncIterator[tuple[list, list[SimCluster]]]:
    ids = ["east", "west", "drained"]
    cfg = router_config(ids, redis_url=redis_server.url)
    routers = [await start_router(cfg), await start_router(cfg)]
    clusters = [
        await start_cluster("east", tmp_path, routers[0].grpc_port, pods=2),
        await start_cluster("west", tmp_path, routers[0].grpc_port, pods=2),
        await start_cluster("drained", tmp_path, routers[0].grpc_port, pods=2, draining=True),
    ]
    try:
        for r in routers:  # replica 1 hears no agent directly: it sees the fleet through Redis
            await eventually(fresh_ready(r, ids), within=15, what="clusters fresh on every replica")
        yield routers, clusters
    finally:
        for c in clusters:
            await c.stop()
        for r in routers:
            await r.stop()


async def test_requests_spread_across_clusters_and_skip_draining(
    fleet: tuple[list, list[SimCluster]],
) -> None:
    routers, _ = fleet
    body = {"model": MODEL, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 8}
    served: Counter[str] = Counter()
    async with httpx.AsyncClient(timeout=30) as client:

        async def one(i: int) -> None:
            r = await client.post(
                f"{routers[i % 2].url}/v1/chat/completions",
                json=body,
                headers={"authorization": f"Bearer {KEY}"},
            )
            assert r.status_code == 200, r.text
            served[r.headers["x-fleetgate-cluster"]] += 1

        await asyncio.gather(*(one(i) for i in range(40)))
    assert served["drained"] == 0
    assert served["east"] >= 8 and served["west"] >= 8, served  # a burst does not pile onto one cluster


async def test_openai_client_through_the_global_endpoint(fleet: tuple[list, list[SimCluster]]) -> None:
    routers, _ = fleet
    client = openai.AsyncOpenAI(base_url=f"{routers[1].url}/v1", api_key=KEY, max_retries=0)
    try:
        models = await client.models.list()
        assert MODEL in [m.id for m in models.data]
        chat = await client.chat.completions.create(
            model=MODEL, messages=[{"role": "user", "content": "hello"}], max_tokens=6
        )
        assert chat.choices[0].message.content and chat.usage is not None
        comp = await client.completions.create(model=MODEL, prompt="Once upon", max_tokens=6)
        assert comp.choices[0].text
        stream = await client.chat.completions.create(
            model=MODEL,
            messages=[{"role": "user", "content": "stream please"}],
            max_tokens=10,
            stream=True,
            stream_options={"include_usage": True},
        )
        pieces: list[str] = []
        usage = None
        async for chunk in stream:
            if chunk.choices and chunk.choices[0].delta.content:
                pieces.append(chunk.choices[0].delta.content)
            if chunk.usage is not None:
                usage = chunk.usage
        assert len(pieces) >= 2 and usage is not None and usage.completion_tokens == 10
        with pytest.raises(openai.AuthenticationError):
            bad = openai.AsyncOpenAI(base_url=f"{routers[1].url}/v1", api_key="sk-wrong", max_retries=0)
            await bad.models.list()
    finally:
        await client.close()
