"""A stolen agent token cannot steer traffic: pinned URLs, plausible numbers, one stream per cluster."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator

import grpc
import httpx
import pytest
from prometheus_client import CollectorRegistry

from common.config.router import AgentAuth, ReportLimits, Selection
from common.config.router import CapacityServer as CapacityServerConfig
from common.proto.fleetgate.v1 import capacity_pb2, capacity_pb2_grpc
from global_router.agent_auth import hash_token
from global_router.capacity_server import CapacityServer
from global_router.dispatch_tracker import DispatchTracker
from global_router.fleet_view import MemoryFleetView
from global_router.report_policy import PolicyRefusal, ReportPolicy
from global_router.selection import ClusterSelector, SelectionRequest
from tests.global_router.integration.fleet_harness import agent_token, router_config, start_router

TOKEN = "agent-token-cluster-a-123"
LOOP_TOKEN = "agent-token-loopback-456"
PINNED = "http://gw.c-a.internal:8080"
AUTH = (("authorization", f"Bearer {TOKEN}"),)


class Clock:
    def __init__(self) -> None:
        self.t = 100.0

    def __call__(self) -> float:
        return self.t


def agents() -> list[AgentAuth]:
    return [
        AgentAuth(cluster_id="c-a", token_sha256=hash_token(TOKEN), gateway_urls=[PINNED]),
        AgentAuth(
            cluster_id="c-lo",
            token_sha256=hash_token(LOOP_TOKEN),
            gateway_hosts=["127.0.0.1"],
            allow_loopback=True,
        ),
    ]


def report(
    seq: int, url: str = PINNED, cluster_id: str = "c-a", **model: float
) -> capacity_pb2.CapacityReport:
    m = {"model": "m", "ready_pods": 2, "kv_headroom": 0.5, "headroom_requests": 8, **model}
    return capacity_pb2.CapacityReport(
        cluster_id=cluster_id,
        region="r",
        gateway_url=url,
        sequence=seq,
        models=[capacity_pb2.ModelCapacity(**m)],
    )


@contextlib.asynccontextmanager
async def server(clock: Clock | None = None) -> AsyncIterator[tuple[CapacityServer, int, MemoryFleetView]]:
    fleet = MemoryFleetView(ttl_s=60)
    cfg = CapacityServerConfig(host="127.0.0.1", port=0, stale_after_s=3.0, agents=agents())
    srv = CapacityServer(cfg, fleet, registry=CollectorRegistry(), clock=clock or Clock())
    port = await srv.start()
    try:
        yield srv, port, fleet
    finally:
        await srv.stop(grace=0.1)


class Stream:
    def __init__(self, port: int, auth: tuple[tuple[str, str], ...] = AUTH) -> None:
        self.channel = grpc.aio.insecure_channel(f"127.0.0.1:{port}")
        self.call = capacity_pb2_grpc.CapacityServiceStub(self.channel).Report(metadata=auth, timeout=10)

    async def send(self, r: capacity_pb2.CapacityReport) -> capacity_pb2.Directive:
        await self.call.write(r)
        d = await self.call.read()
        assert isinstance(d, capacity_pb2.Directive), d
        return d

    async def close(self) -> None:
        self.call.cancel()
        await self.channel.close()


def refused_count(srv: CapacityServer, cluster: str, reason: str) -> float:
    return srv.metrics.refused.labels(cluster, reason)._value.get()


FORBIDDEN = [
    ("http://169.254.169.254/latest/meta-data/", "forbidden_address"),
    ("http://metadata.google.internal/computeMetadata/v1/", "forbidden_address"),
    ("http://[fd00:ec2::254]/", "forbidden_address"),
    ("http://[fe80::1]:8080", "forbidden_address"),
    ("http://127.0.0.1:8080", "forbidden_address"),
    ("http://localhost:8080", "forbidden_address"),
    ("http://[::1]:8080", "forbidden_address"),
    ("http://[::ffff:127.0.0.1]:8080", "forbidden_address"),
    ("http://2130706433:8080", "forbidden_address"),
    ("http://0x7f.1:8080", "forbidden_address"),
    ("http://0.0.0.0:8080", "forbidden_address"),
    ("http://user:pw@gw.c-a.internal:8080", "bad_url"),
    ("http://gw.c-a.internal:8080/?steal=1", "bad_url"),
    ("http://gw.c-a.internal:99999", "bad_url"),
    ("http://attacker.example:8080", "unpinned_url"),
    ("https://gw.c-a.internal:8080", "unpinned_url"),
    ("http://gw.c-a.internal:6379", "unpinned_url"),
    ("http://10.0.0.7:8080", "unpinned_url"),
]


async def test_each_forbidden_url_is_refused_with_a_directive_and_a_metric_and_routing_is_unchanged() -> None:
    async with server() as (srv, port, fleet):
        s = Stream(port)
        try:
            ok = await s.send(report(1))
            assert ok.ack.sequence == 1 and not ok.message
            before = fleet.get("c-a")
            assert before is not None and before.gateway_url == PINNED
            selector = ClusterSelector(Selection(), stale_after_s=30, tracker=DispatchTracker())
            pick = (
                selector.rank(fleet.snapshot(), SelectionRequest(model="m")).candidates[0].cluster.gateway_url
            )
            for seq, (url, reason) in enumerate(FORBIDDEN, start=2):
                d = await s.send(report(seq, url=url))
                assert d.ack.sequence == 1, url  # not accepted
                assert "refused" in d.message, (url, d.message)
                assert refused_count(srv, "c-a", reason) >= 1, (url, reason)
                assert fleet.get("c-a") == before, url  # the fleet view did not move
            assert (
                selector.rank(fleet.snapshot(), SelectionRequest(model="m")).candidates[0].cluster.gateway_url
                == pick
            )
            assert "not pinned" in (await s.send(report(99, url="http://evil.example"))).message
            # the real agent's next report is still accepted on the same stream
            assert (await s.send(report(100))).ack.sequence == 100
        finally:
            await s.close()


@pytest.mark.parametrize(
    "absurd",
    [
        {"headroom_requests": 4294967295},
        {"headroom_requests": 2 * 1024 + 1},  # 2 ready pods x maxHeadroomPerPod 1024, plus one
        {"ready_pods": 1_000_000, "headroom_requests": 1},
        {"running": 10_000_000},
        {"gpu_tokens_per_second": 1e12},
        {"tokens_per_second": 1e15},
    ],
)
async def test_absurd_numbers_are_refused_and_change_no_routing(absurd: dict[str, float]) -> None:
    async with server() as (srv, port, fleet):
        s = Stream(port)
        try:
            await s.send(report(1))
            before = fleet.get("c-a")
            d = await s.send(report(2, **absurd))
            assert d.ack.sequence == 1 and "refused" in d.message
            assert refused_count(srv, "c-a", "implausible") == 1
            assert fleet.get("c-a") == before
        finally:
            await s.close()


async def test_the_routers_own_listener_is_refused_even_on_allowed_loopback() -> None:
    async with server() as (_, port, fleet):
        s = Stream(port, (("authorization", f"Bearer {LOOP_TOKEN}"),))
        try:
            d = await s.send(report(1, url=f"http://127.0.0.1:{port}", cluster_id="c-lo"))
            assert "router's own" in d.message and fleet.get("c-lo") is None
            ok = await s.send(report(2, url="http://127.0.0.1:18080", cluster_id="c-lo"))  # allowed loopback
            assert ok.ack.sequence == 2 and fleet.get("c-lo") is not None
        finally:
            await s.close()


async def test_a_second_stream_for_a_cluster_is_refused_and_cannot_interleave() -> None:
    clock = Clock()
    async with server(clock) as (srv, port, fleet):
        real = Stream(port)
        assert (await real.send(report(1))).ack.sequence == 1
        thief = Stream(port)  # the same token, opened while the real agent's stream is active
        try:
            # refused at its opening, from its token, before any message: read the status first (a
            # write racing the server's close fails locally as INTERNAL and hides the status)
            with pytest.raises(grpc.aio.AioRpcError) as err:
                await thief.call.read()
            assert err.value.code() == grpc.StatusCode.ALREADY_EXISTS
            assert "already has an active report stream" in (err.value.details() or "")
            with pytest.raises((grpc.aio.AioRpcError, asyncio.InvalidStateError)):
                await thief.send(report(1000, headroom_requests=16))  # nothing it sends is read
            assert refused_count(srv, "c-a", "second_stream") == 1
            assert (await real.send(report(2))).ack.sequence == 2  # the real agent goes on
            state = fleet.get("c-a")
            assert state is not None and state.seq == 2
        finally:
            await real.close()
            await thief.close()


async def test_a_silent_stream_is_taken_over_and_closed_at_its_next_report() -> None:
    clock = Clock()
    async with server(clock) as (srv, port, fleet):
        old = Stream(port)
        assert (await old.send(report(50))).ack.sequence == 50
        clock.t += 3.5  # the active stream has been silent longer than staleAfterS (3 s)
        new = Stream(port)
        try:
            assert (await new.send(report(1))).ack.sequence == 1  # a restarted agent starts at 1
            assert fleet.get("c-a").seq == 1  # type: ignore[union-attr]
            with pytest.raises(grpc.aio.AioRpcError) as err:
                await old.send(report(51))
            assert err.value.code() == grpc.StatusCode.ABORTED
            assert fleet.get("c-a").seq == 1  # type: ignore[union-attr]  # the old stream's 51 never landed
            assert srv.connected_clusters() == ["c-a"]
        finally:
            await old.close()
            await new.close()


def test_pins_are_required_and_bad_pins_are_config_errors() -> None:
    with pytest.raises(ValueError, match="gatewayUrls"):
        AgentAuth(cluster_id="x", token_sha256=hash_token("t"))
    with pytest.raises(ValueError, match=r"agents\[0\]\.gatewayUrls\[0\]"):
        ReportPolicy(
            [AgentAuth(cluster_id="x", token_sha256="0" * 64, gateway_urls=["ftp://x"])], ReportLimits()
        )


def test_the_routers_http_port_and_redis_are_refused_as_own_addresses() -> None:
    pol = ReportPolicy(
        [AgentAuth(cluster_id="x", token_sha256="0" * 64, gateway_hosts=["*"], allow_loopback=True)],
        ReportLimits(),
        own_addresses=[("0.0.0.0", 8000)],
        local_ips=frozenset({"10.1.2.3"}),
    )
    pol.add_own_address("redis.internal", 6379)
    for url in ("http://127.0.0.1:8000", "http://10.1.2.3:8000", "http://redis.internal:6379"):
        with pytest.raises(PolicyRefusal, match="router's own"):
            pol.check_url("x", url)
    pol.check_url("x", "http://10.1.2.3:8080")  # another port on the same host is a gateway


async def test_refusals_are_counted_on_the_routers_metrics_endpoint() -> None:
    router = await start_router(router_config(["east"]))
    try:
        s = Stream(router.grpc_port, (("authorization", f"Bearer {agent_token('east')}"),))
        try:
            d = await s.send(report(1, url="http://169.254.169.254/", cluster_id="east"))
            assert "metadata" in d.message and router.fleet.get("east") is None
        finally:
            await s.close()
        async with httpx.AsyncClient() as client:
            text = (await client.get(f"{router.url}/metrics")).text
        assert (
            'fleetgate_capacity_reports_refused_total{cluster="east",reason="forbidden_address"} 1.0' in text
        )
    finally:
        await router.stop()
