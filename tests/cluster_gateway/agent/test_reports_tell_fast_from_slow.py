"""End to end: an H100 fleet and an L4 fleet behind their own gateways; after the same few requests,
the router hears a lower TTFT estimate and more headroom from the H100 cluster."""

from __future__ import annotations

import asyncio
import uuid
from typing import Any

import httpx
import pytest

from cluster_gateway.gateway import ClusterGateway
from common.config.gateway import GatewaySpec
from common.config.loader import load_config_data
from global_router.fleet_view import FleetView, ModelCapacity
from modelsim.fleet import PodSpec, SimFleet
from tests.eventually import eventually
from tests.global_router.capacity.helpers import TOKEN_A, TOKEN_B, running_server

MODEL = "meta-llama/Llama-3.1-8B-Instruct"
PROMPT = "Summarise the quarterly revenue by region. " * 48  # ~520 tokens, made unique per request


def spec_for(cluster_id: str, urls: list[str], router_port: int, token_env: str) -> GatewaySpec:
    data: dict[str, Any] = {
        "clusterId": cluster_id,
        "discovery": {"static": {"endpoints": urls}},
        "scrape": {"intervalMs": 50, "maxStalenessMs": 1000},
        "globalRouter": {
            "address": f"127.0.0.1:{router_port}",
            "tokenEnv": token_env,
            "reportIntervalMs": 100,
        },
    }
    return load_config_data(data, GatewaySpec, source="test")


async def drive(gw: ClusterGateway, n: int) -> None:
    async with httpx.AsyncClient(base_url=gw.url, timeout=30.0) as client:
        rs = await asyncio.gather(
            *(
                client.post(
                    "/v1/completions",
                    json={"model": MODEL, "prompt": f"{uuid.uuid4()} {PROMPT}", "max_tokens": 12},
                )
                for _ in range(n)
            )
        )
    assert [r.status_code for r in rs] == [200] * n


def capacity(fleet: FleetView, cluster_id: str) -> ModelCapacity | None:
    state = fleet.get(cluster_id)
    return state.models.get(MODEL) if state is not None else None


async def test_reports_of_an_h100_and_an_l4_cluster_differ_in_the_expected_direction(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("TEST_TOKEN_A", TOKEN_A)
    monkeypatch.setenv("TEST_TOKEN_B", TOKEN_B)
    h100 = SimFleet([PodSpec(profile="h100-llama3-8b", model=MODEL, seed=i) for i in range(2)])
    l4 = SimFleet([PodSpec(profile="l4-llama3-8b", model=MODEL, seed=i) for i in range(2)])
    async with h100 as fast_sims, l4 as slow_sims, running_server(interval_ms=100) as (_, port, fleet):
        fast = ClusterGateway(spec_for("c-a", fast_sims.urls, port, "TEST_TOKEN_A"), port=0)
        slow = ClusterGateway(spec_for("c-b", slow_sims.urls, port, "TEST_TOKEN_B"), port=0)
        await fast.start()
        await slow.start()
        try:

            def both_ready() -> bool:
                return all(
                    (c := capacity(fleet, cid)) is not None and c.ready_pods == 2 for cid in ("c-a", "c-b")
                )

            await eventually(both_ready, within=10.0, what="both clusters reported two ready pods")
            # Before any traffic nothing measured the pods' speed: only their KV pools differ.
            before = {cid: capacity(fleet, cid) for cid in ("c-a", "c-b")}
            assert before["c-a"] is not None and before["c-b"] is not None
            assert before["c-a"].est_ttft_ms == before["c-b"].est_ttft_ms

            await asyncio.gather(drive(fast, 6), drive(slow, 6))

            def measured() -> bool:  # idle again, estimates from the pods' own prefill figures
                a, b = capacity(fleet, "c-a"), capacity(fleet, "c-b")
                return (
                    a is not None
                    and b is not None
                    and a.running + b.running + a.queued + b.queued == 0
                    and a.est_ttft_ms != before["c-a"].est_ttft_ms
                    and b.est_ttft_ms != before["c-b"].est_ttft_ms
                )

            await eventually(measured, within=10.0, what="reports with measured pod speed")
            a, b = capacity(fleet, "c-a"), capacity(fleet, "c-b")
            assert a is not None and b is not None
            assert b.est_ttft_ms > 2 * a.est_ttft_ms, (a.est_ttft_ms, b.est_ttft_ms)
            assert b.headroom_requests < a.headroom_requests, (a.headroom_requests, b.headroom_requests)
        finally:
            await slow.stop()
            await fast.stop()
