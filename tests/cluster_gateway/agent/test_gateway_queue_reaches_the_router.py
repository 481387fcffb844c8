"""End to end: a real gateway whose only pod is saturated holds requests in its admission queue;
its agent's reports (and the router's view of them) count those requests and advertise no room."""

from __future__ import annotations

import asyncio

import httpx
import pytest

from cluster_gateway.agent.aggregate import build_report
from cluster_gateway.gateway import ClusterGateway
from modelsim.fleet import SimFleet
from tests.cluster_gateway.integration.conftest import MODEL, chat, gateway_spec, tiny, wait_ready
from tests.eventually import eventually
from tests.global_router.capacity.helpers import TOKEN_A, running_server

HELD = 6


async def test_requests_held_in_the_gateway_show_in_its_capacity_reports(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("TEST_TOKEN_A", TOKEN_A)
    async with SimFleet([tiny(time_scale=4.0)]) as sims, running_server(interval_ms=100) as (_, port, fleet):
        spec = gateway_spec(
            sims.urls,
            clusterId="c-a",
            admission={"queueTimeoutMs": 20000},
            globalRouter={
                "address": f"127.0.0.1:{port}",
                "tokenEnv": "TEST_TOKEN_A",
                "reportIntervalMs": 100,
            },
        )
        gw = ClusterGateway(spec, port=0, extproc_port=0)
        await gw.start()
        direct = httpx.AsyncClient(base_url=sims.urls[0], timeout=60)
        via_gw = httpx.AsyncClient(base_url=gw.url, timeout=60)
        tasks: list[asyncio.Task[httpx.Response]] = []
        try:
            await wait_ready(gw, 1)
            body = {"model": MODEL, "prompt": "q" * 400, "max_tokens": 64}
            tasks += [asyncio.create_task(direct.post("/v1/completions", json=body)) for _ in range(24)]
            await eventually(
                lambda: all(p.metrics is not None and p.metrics.waiting >= 5 for p in gw.pool.pods()),
                within=5.0,
                what="the pod saturated",
            )
            tasks += [
                asyncio.create_task(via_gw.post("/v1/chat/completions", json=chat("q"))) for _ in range(HELD)
            ]
            await eventually(
                lambda: len(gw.admission) == HELD, within=5.0, what="requests held in the gateway"
            )

            assert gw.agent is not None
            sent = {m.model: m for m in gw.agent.report_now().models}[MODEL]
            pods_only = {m.model: m for m in build_report(spec, gw.pool, 0, gw.agent.saturation).models}[
                MODEL
            ]
            assert sent.queued == pods_only.queued + HELD
            assert sent.headroom_requests == 0
            assert sent.est_ttft_ms > pods_only.est_ttft_ms

            def router_sees_held() -> bool:
                state = fleet.get("c-a")
                m = state.models.get(MODEL) if state is not None else None
                return m is not None and m.queued >= HELD and m.headroom_requests == 0

            await eventually(router_sees_held, within=5.0, what="the router counting the held requests")
        finally:
            for t in tasks:
                t.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            await via_gw.aclose()
            await direct.aclose()
            await gw.stop()
