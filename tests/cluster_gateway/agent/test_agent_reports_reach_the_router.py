"""A real agent streams to a real grpc.aio CapacityServer on loopback."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator
from dataclasses import replace

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc

from cluster_gateway.pool import EndpointPool
from global_router.capacity_server import SERVICE_NAME, CapacityServer
from global_router.fleet_view import MemoryFleetView, ModelCapacity
from tests.cluster_gateway.agent.pools import add_pod
from tests.eventually import eventually
from tests.global_router.capacity.helpers import running_agent, running_server, sample_pool, server_config


async def test_reports_arrive_in_the_fleet_view_and_are_acknowledged() -> None:
    async with running_server() as (server, port, fleet):
        pool = sample_pool()
        async with running_agent(port, pool) as agent:
            await eventually(lambda: agent.connected and fleet.get("c-a") is not None, what="first report")
            state = fleet.get("c-a")
            assert state is not None
            assert state.gateway_url == "http://c-a.example:8080"
            assert state.region == "eu-west"
            llama = state.models["llama"]
            assert llama.ready_pods == 2 and llama.queued == 1 and llama.running == 5
            assert "sql-lora" in llama.adapters and llama.adapters_resident == frozenset({"sql-lora"})
            assert state.age() < 5
            await eventually(lambda: agent.last_acked >= state.seq, what="ack")
            assert server.connected_clusters() == ["c-a"]
        await eventually(lambda: server.connected_clusters() == [], what="disconnect noticed")


async def test_router_interval_directive_overrides_the_configured_interval() -> None:
    async with (
        running_server(interval_ms=100) as (_, port, fleet),
        running_agent(port, sample_pool(), interval_ms=10_000) as agent,
    ):
        await eventually(lambda: agent.interval_s == 0.1, what="interval directive")
        first = fleet.get("c-a")
        assert first is not None
        await asyncio.sleep(1.0)
        later = fleet.get("c-a")
        assert later is not None
        # at 100 ms a second ≈ 10 reports; generous margin for a contended CPU
        assert later.seq - first.seq >= 4


async def test_significant_change_triggers_an_early_report() -> None:
    async with running_server(interval_ms=30_000) as (_, port, fleet):
        pool = sample_pool()
        async with running_agent(port, pool, interval_ms=30_000) as agent:
            await eventually(lambda: fleet.get("c-a") is not None, what="first report")
            seq0 = fleet.get("c-a").seq  # type: ignore[union-attr]
            add_pod(pool, "p2", models={"llama"}, waiting=9, running=3, kv=0.3)  # p2 saturates
            t0 = time.monotonic()
            await eventually(
                lambda: fleet.get("c-a").models["llama"].saturated_pods == 1,  # type: ignore[union-attr]
                within=3.0,
                what="early report after saturation",
            )
            assert time.monotonic() - t0 < 3.0  # long before the 30 s interval
            assert fleet.get("c-a").seq > seq0  # type: ignore[union-attr]
            assert agent.early_reports >= 1


@contextlib.asynccontextmanager
async def fresh_scrapes(pool: EndpointPool, every_s: float = 0.2) -> AsyncIterator[None]:
    """Re-records each pod's last metrics as just scraped, as the gateway's scraper would."""

    async def rescrape() -> None:
        while True:
            await asyncio.sleep(every_s)
            for pod in pool.pods():
                if pod.metrics is not None:
                    pool.record_scrape(pod.name, replace(pod.metrics, scraped_at=time.monotonic()))

    task = asyncio.create_task(rescrape())
    try:
        yield
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task


async def test_a_gateway_queue_forming_or_clearing_triggers_an_early_report() -> None:
    held: dict[str, int] = {}
    pool = sample_pool()
    async with (
        running_server(interval_ms=30_000) as (_, port, fleet),
        fresh_scrapes(pool),  # the test outlasts maxStalenessMs: pods going stale would report early too
        running_agent(port, pool, interval_ms=30_000, gateway_queued=lambda: dict(held)) as agent,
    ):

        def llama() -> ModelCapacity:
            state = fleet.get("c-a")
            assert state is not None
            return state.models["llama"]

        def seq() -> int:
            state = fleet.get("c-a")
            assert state is not None
            return state.seq

        await eventually(lambda: fleet.get("c-a") is not None, what="first report")
        on_pods = llama().queued

        async def router_sees(queued: int, what: str) -> None:
            t0 = time.monotonic()
            await eventually(lambda: llama().queued == queued, within=3.0, what=what)
            assert time.monotonic() - t0 < 3.0  # long before the 30 s interval

        held["llama"] = 2
        await router_sees(on_pods + 2, "early report of the queue forming")
        assert agent.early_reports == 1

        seq0, sent0 = seq(), agent.reports_sent
        for depth in (3, 2, 1, 2, 3, 2, 1, 3, 2, 2):  # ±1 within the 1-3 level, for ~1.5 s
            held["llama"] = depth
            await asyncio.sleep(0.15)
        assert (seq(), agent.reports_sent, agent.early_reports) == (seq0, sent0, 1)

        held["llama"] = 5  # a growing queue crosses into 4-15
        await router_sees(on_pods + 5, "early report of the queue growing")
        assert agent.early_reports == 2

        del held["llama"]
        await router_sees(on_pods, "early report of the queue clearing")
        assert agent.early_reports == 3
        assert agent.reports_sent == sent0 + 2


async def test_drain_set_at_the_router_reaches_the_agent() -> None:
    seen: list[bool] = []
    async with (
        running_server(interval_ms=100) as (_, port, fleet),
        running_agent(port, sample_pool(), on_drain=seen.append) as agent,
    ):
        await eventually(lambda: agent.connected, what="connect")
        assert agent.drain_requested is False
        await fleet.set_router_drain("c-a", True)
        await eventually(lambda: agent.drain_requested, what="drain directive")
        assert fleet.get("c-a").router_drain is True  # type: ignore[union-attr]
        await fleet.set_router_drain("c-a", False)
        await eventually(lambda: not agent.drain_requested, what="undrain directive")
        assert seen == [True, False]


async def test_agent_reconnects_after_the_router_restarts() -> None:
    async with contextlib.AsyncExitStack() as stack:
        first = CapacityServer(server_config(0, interval_ms=100), MemoryFleetView())
        port = await first.start()
        stack.push_async_callback(first.stop)
        agent = await stack.enter_async_context(running_agent(port, sample_pool()))
        await eventually(lambda: agent.connected, what="connect")
        await first.stop(grace=0.2)
        await eventually(lambda: not agent.connected, what="disconnect")
        await asyncio.sleep(0.5)  # a few failed attempts while the router is down
        async with running_server(port=port, interval_ms=100) as (_, _, fleet2):
            t0 = time.monotonic()
            # the router stores the report before its directive reaches the agent: wait for both
            await eventually(
                lambda: fleet2.get("c-a") is not None and agent.connected,
                within=5.0,
                what="report and directive after restart",
            )
            assert time.monotonic() - t0 < 5.0
            assert agent.sessions >= 2


async def test_health_service_reports_serving() -> None:
    async with running_server() as (_, port, _), grpc.aio.insecure_channel(f"127.0.0.1:{port}") as ch:
        stub = health_pb2_grpc.HealthStub(ch)
        for service in ("", SERVICE_NAME):
            resp = await stub.Check(health_pb2.HealthCheckRequest(service=service), timeout=5)
            assert resp.status == health_pb2.HealthCheckResponse.SERVING


async def test_a_flapping_pod_does_not_flood_the_router_with_reports() -> None:
    pool = sample_pool()
    async with (
        running_server(interval_ms=30_000) as (_, port, fleet),
        running_agent(port, pool, interval_ms=30_000, check_interval_s=0.02, min_early_gap_s=0.25) as agent,
    ):
        await eventually(lambda: fleet.get("c-a") is not None, what="first report")
        before = agent.reports_sent
        t0 = time.monotonic()
        for i in range(40):  # saturation flips every 25 ms for ~1 s
            add_pod(pool, "p2", models={"llama"}, waiting=9 if i % 2 else 0, running=3, kv=0.3)
            await asyncio.sleep(0.025)
        elapsed = time.monotonic() - t0
        sent = agent.reports_sent - before
        assert 1 <= sent <= elapsed / 0.25 + 2


async def test_a_draining_gateway_says_so_at_once_and_learns_the_router_heard_it() -> None:
    # a 30 s interval: only the early report the drain triggers can carry it in time
    async with (
        running_server(interval_ms=30_000) as (_, port, fleet),
        running_agent(port, sample_pool(), interval_ms=30_000) as agent,
    ):
        await eventually(lambda: agent.connected and fleet.get("c-a") is not None, what="first report")
        assert not fleet.get("c-a").draining and not agent.drain_acknowledged  # type: ignore[union-attr]
        agent.draining = True  # what ClusterGateway.drain() does on SIGTERM
        await eventually(lambda: fleet.get("c-a").draining, within=3.0, what="draining report")  # type: ignore[union-attr]
        await eventually(lambda: agent.drain_acknowledged, within=3.0, what="the router's ack of it")
