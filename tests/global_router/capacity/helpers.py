"""Shared pieces for capacity-protocol tests: tokens, a running server, polling."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from typing import Any

from cluster_gateway.agent.client import CapacityAgent
from cluster_gateway.pool import EndpointPool
from common.config.router import AgentAuth
from common.config.router import CapacityServer as CapacityServerConfig
from common.proto.fleetgate.v1 import capacity_pb2
from global_router.agent_auth import hash_token
from global_router.capacity_server import CapacityServer
from global_router.fleet_view import FleetView, MemoryFleetView
from tests.cluster_gateway.agent.pools import add_pod, make_spec

TOKEN_A = "agent-a-token-1234"
TOKEN_B = "agent-b-token-5678"
# where these tests' gateways live: the sample reports' host, and loopback agents (explicitly allowed)
PINNED_HOSTS = ["gw.example", "*.example", "127.0.0.1"]


def server_config(port: int = 0, *, interval_ms: int = 1000, **kw: Any) -> CapacityServerConfig:
    agents = [
        AgentAuth(
            cluster_id=cid, token_sha256=hash_token(tok), gateway_hosts=PINNED_HOSTS, allow_loopback=True
        )
        for cid, tok in (("c-a", TOKEN_A), ("c-b", TOKEN_B))
    ]
    return CapacityServerConfig(
        host="127.0.0.1", port=port, report_interval_ms=interval_ms, agents=agents, **kw
    )


@contextlib.asynccontextmanager
async def running_server(
    fleet: FleetView | None = None, port: int = 0, **kw: Any
) -> AsyncIterator[tuple[CapacityServer, int, FleetView]]:
    fleet = fleet if fleet is not None else MemoryFleetView()
    server = CapacityServer(server_config(port, **kw), fleet)
    bound = await server.start()
    try:
        yield server, bound, fleet
    finally:
        await server.stop(grace=0.2)


def sample_pool() -> EndpointPool:
    pool = EndpointPool()
    add_pod(pool, "p1", models={"llama", "sql-lora"}, running=2, kv=0.2, adapters={"sql-lora"})
    add_pod(pool, "p2", models={"llama"}, waiting=1, running=3, kv=0.3)
    return pool


@contextlib.asynccontextmanager
async def running_agent(
    port: int,
    pool: EndpointPool,
    *,
    token: str = TOKEN_A,
    cluster_id: str = "c-a",
    interval_ms: int = 1000,
    tls_ca_file: str | None = None,
    **kw: Any,
) -> AsyncIterator[CapacityAgent]:
    spec = make_spec(f"127.0.0.1:{port}", cluster_id=cluster_id, interval_ms=interval_ms)
    if tls_ca_file is not None:
        assert spec.global_router is not None
        spec.global_router.tls = True
        spec.global_router.ca_file = tls_ca_file
    agent = CapacityAgent(spec, pool, token=token, backoff_initial_s=0.05, backoff_max_s=0.3, **kw)
    task = asyncio.create_task(agent.run())
    try:
        yield agent
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task


def report(
    cluster_id: str = "c-a", seq: int = 1, url: str = "http://gw.example:8080"
) -> capacity_pb2.CapacityReport:
    return capacity_pb2.CapacityReport(
        cluster_id=cluster_id,
        region="r",
        gateway_url=url,
        sequence=seq,
        models=[
            capacity_pb2.ModelCapacity(
                model="m", ready_pods=1, kv_headroom=0.5, headroom_requests=3, gpu_tokens_per_second=750.0
            )
        ],
    )
