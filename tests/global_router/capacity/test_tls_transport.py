"""With tlsCertFile/tlsKeyFile the CapacityService speaks TLS; agents verify it with caFile."""

from __future__ import annotations

from pathlib import Path

import pytest

from cluster_gateway.agent.client import CapacityAgent
from common.config.gateway import GlobalRouterLink
from common.config.loader import ConfigError
from global_router.capacity_server import CapacityServer
from global_router.fleet_view import MemoryFleetView
from tests.cluster_gateway.agent.pools import make_spec
from tests.eventually import eventually
from tests.global_router.capacity.helpers import running_agent, running_server, sample_pool, server_config


async def test_agent_reports_over_tls_verified_with_the_ca_file(tls_cert: tuple[str, str]) -> None:
    crt, key = tls_cert
    async with running_server(tls_cert_file=crt, tls_key_file=key) as (server, port, fleet):
        assert server.tls
        async with running_agent(port, sample_pool(), tls_ca_file=crt) as agent:
            await eventually(lambda: agent.connected and fleet.get("c-a") is not None, what="report over TLS")


async def test_plaintext_agent_cannot_talk_to_a_tls_router(tls_cert: tuple[str, str]) -> None:
    crt, key = tls_cert
    async with (
        running_server(tls_cert_file=crt, tls_key_file=key) as (_, port, fleet),
        running_agent(port, sample_pool()) as agent,
    ):
        await eventually(lambda: agent.last_error is not None, what="plaintext refused")
        assert not agent.connected
        assert fleet.snapshot() == []


def test_half_tls_config_and_unreadable_ca_are_clear_errors(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match=r"tlsCertFile and capacity\.tlsKeyFile"):
        CapacityServer(server_config(tls_cert_file=str(tmp_path / "c.pem")), MemoryFleetView())
    spec = make_spec()
    spec.global_router = GlobalRouterLink(
        address="127.0.0.1:1", tls=True, ca_file=str(tmp_path / "missing.pem")
    )
    with pytest.raises(ConfigError, match=r"globalRouter\.caFile"):
        CapacityAgent(spec, sample_pool(), token="t")


async def test_unreadable_server_certificate_fails_start_naming_the_field(tmp_path: Path) -> None:
    server = CapacityServer(
        server_config(tls_cert_file=str(tmp_path / "nope.pem"), tls_key_file=str(tmp_path / "nope.key")),
        MemoryFleetView(),
    )
    with pytest.raises(ValueError, match=r"capacity\.tls(Key|Cert)File"):
        await server.start()


async def test_a_file_that_is_not_pem_fails_start_naming_the_field(tmp_path: Path) -> None:
    junk = tmp_path / "junk.pem"
    junk.write_text("not a certificate")
    server = CapacityServer(server_config(tls_cert_file=str(junk), tls_key_file=str(junk)), MemoryFleetView())
    with pytest.raises(ConfigError, match=r"capacity\.tlsKeyFile: .* not a PEM file"):
        await server.start()


async def test_a_port_in_use_is_a_clear_os_error() -> None:
    async with running_server() as (_, port, _):
        second = CapacityServer(server_config(port), MemoryFleetView())
        with pytest.raises(OSError, match=r"cannot listen on 127\.0\.0\.1"):
            await second.start()
