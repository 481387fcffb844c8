"""A misconfigured agent fails at construction with a message naming the field."""

from __future__ import annotations

import pytest

from cluster_gateway.agent.client import CapacityAgent
from cluster_gateway.pool import EndpointPool
from common.config.loader import ConfigError
from tests.cluster_gateway.agent.pools import make_spec


@pytest.mark.parametrize("address", ["router", "http://router:50051/", "router:port", ""])
def test_router_address_must_be_host_port(address: str) -> None:
    with pytest.raises(ConfigError, match=r"globalRouter\.address"):
        CapacityAgent(make_spec(address), EndpointPool(), token="t")


@pytest.mark.parametrize(
    "address", ["127.0.0.1:50051", "router.example.com:443", "[::1]:50051", "dns:///router:443"]
)
def test_usual_router_addresses_are_accepted(address: str) -> None:
    CapacityAgent(make_spec(address), EndpointPool(), token="t")


def test_agent_needs_a_router_link_and_a_token() -> None:
    spec = make_spec()
    with pytest.raises(ConfigError, match="token"):
        CapacityAgent(spec, EndpointPool(), token="")
    spec.global_router = None
    with pytest.raises(ConfigError, match="globalRouter"):
        CapacityAgent(spec, EndpointPool(), token="t")
