"""A real ClusterGateway over simulated pods runs its agent and reports to a real CapacityServer."""

from __future__ import annotations

from typing import Any

import pytest

from cluster_gateway.gateway import ClusterGateway
from common.config.gateway import GatewaySpec
from common.config.loader import ConfigError, load_config_data
from modelsim.fleet import PodSpec, SimFleet
from tests.eventually import eventually
from tests.global_router.capacity.helpers import TOKEN_A, running_server

MODEL = "meta-llama/Llama-3.1-8B-Instruct"


def spec_for(urls: list[str], router_port: int) -> GatewaySpec:
    data: dict[str, Any] = {
        "clusterId": "c-a",
        "region": "eu-west",
        "discovery": {"static": {"endpoints": urls}},
        "scrape": {"intervalMs": 50, "maxStalenessMs": 1000},
        "globalRouter": {"address": f"127.0.0.1:{router_port}", "tokenEnv": "TEST_AGENT_TOKEN"},
        "capacity": {"costPerGpuHour": 1.5, "capacityType": "spot"},
    }
    return load_config_data(data, GatewaySpec, source="test")


async def test_gateway_agent_reports_the_simulated_pool_with_its_bound_url(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("TEST_AGENT_TOKEN", TOKEN_A)
    pods = [PodSpec(profile="tiny", model=MODEL), PodSpec(profile="tiny", model=MODEL, adapters=["sql"])]
    async with SimFleet(pods) as sims, running_server(interval_ms=200) as (server, port, fleet):
        gw = ClusterGateway(spec_for(sims.urls, port), port=0)
        await gw.start()
        try:
            assert gw.agent is not None

            def reported_two_ready() -> bool:
                s = fleet.get("c-a")
                return s is not None and MODEL in s.models and s.models[MODEL].ready_pods == 2

            await eventually(reported_two_ready, within=10.0, what="both simulated pods reported ready")
            state = fleet.get("c-a")
            assert state is not None
            assert state.gateway_url == gw.url  # the port actually bound, not the config's
            assert state.capacity_type == "spot" and state.cost_per_gpu_hour == 1.5
            assert "sql" in state.models[MODEL].adapters
            assert set(state.models) == {MODEL}
            assert state.models[MODEL].headroom_requests > 0
            assert server.connected_clusters() == ["c-a"]
            # the server stores a report before the agent reads the directive that answers it
            await eventually(
                lambda: gw.agent.connected, within=10.0, what="the agent saw its first directive"
            )
        finally:
            await gw.stop()


def test_gateway_with_a_router_link_but_no_token_fails_naming_the_field(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("TEST_AGENT_TOKEN", raising=False)
    with pytest.raises(ConfigError, match=r"globalRouter\.tokenEnv"):
        ClusterGateway(spec_for(["http://127.0.0.1:1"], 1), port=0)
