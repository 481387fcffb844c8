"""RedisFleetView with a real redis-server: replicas share the fleet, TTL expiry, outage survival."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator
from pathlib import Path

import grpc
import pytest
import redis.asyncio as aioredis
from redis.asyncio.retry import Retry
from redis.backoff import NoBackoff

from common.proto.fleetgate.v1 import capacity_pb2_grpc
from global_router.fleet_view import ClusterState, FleetViewError, RedisFleetView, state_from_report
from tests.conftest import start_redis
from tests.eventually import eventually
from tests.global_router.capacity.helpers import TOKEN_A, report, running_server
from tests.procs import RedisServer, free_port


def state(cluster_id: str = "c-a", seq: int = 1) -> ClusterState:
    return state_from_report(report(cluster_id, seq), time.time())


@contextlib.asynccontextmanager
async def view(url: str, *, ttl_s: float = 5.0, rescan_s: float = 0.2) -> AsyncIterator[RedisFleetView]:
    # as the router builds it: short timeouts, no client-side retries
    client = aioredis.Redis.from_url(
        url,
        socket_timeout=0.25,
        socket_connect_timeout=0.25,
        retry=Retry(NoBackoff(), 0),
        health_check_interval=0,
    )
    v = RedisFleetView(client, prefix="test:", ttl_s=ttl_s, rescan_interval_s=rescan_s, op_timeout_s=0.5)
    await v.start()
    try:
        yield v
    finally:
        await v.stop()
        await client.aclose()


async def test_a_report_published_through_one_replica_is_seen_by_another(redis_server: RedisServer) -> None:
    async with view(redis_server.url) as a, view(redis_server.url) as b:
        await a.publish(state("c-a", seq=3))
        assert a.get("c-a") is not None  # the writer sees it at once, without I/O
        await eventually(lambda: b.get("c-a") is not None, within=3.0, what="replica b sees c-a")
        got = b.get("c-a")
        assert got is not None and got.seq == 3 and got.models["m"].headroom_requests == 3
        assert got.models["m"].gpu_tokens_per_s == 750.0  # the cost-per-token input crosses replicas
        await b.publish(state("c-b", seq=1))
        await eventually(lambda: {s.cluster_id for s in a.snapshot()} == {"c-a", "c-b"}, what="a sees both")


async def test_a_replica_started_later_converges_by_rescan(redis_server: RedisServer) -> None:
    async with view(redis_server.url) as a:
        await a.publish(state("c-a", seq=9))
        async with view(redis_server.url) as late:
            assert late.get("c-a") is not None and late.get("c-a").seq == 9  # type: ignore[union-attr]


async def test_router_drain_is_shared_between_replicas(redis_server: RedisServer) -> None:
    async with view(redis_server.url) as a, view(redis_server.url) as b:
        await a.publish(state("c-a"))
        await eventually(lambda: b.get("c-a") is not None, what="b sees c-a")
        await a.set_router_drain("c-a", True)
        await eventually(
            lambda: b.router_drained("c-a") and b.get("c-a").router_drain, what="b sees the drain"
        )  # type: ignore[union-attr]
        await a.publish(state("c-a", seq=2))  # a new report keeps the operator's drain
        await eventually(lambda: b.get("c-a").seq == 2, what="b sees seq 2")  # type: ignore[union-attr]
        assert b.get("c-a").router_drain is True  # type: ignore[union-attr]
        await b.set_router_drain("c-a", False)
        await eventually(lambda: not a.router_drained("c-a"), what="a sees the undrain")


async def test_a_silent_cluster_disappears_when_its_key_expires(redis_server: RedisServer) -> None:
    async with view(redis_server.url, ttl_s=0.6) as a, view(redis_server.url, ttl_s=0.6) as b:
        await a.publish(state("c-silent"))
        await eventually(lambda: b.get("c-silent") is not None, what="b sees it")
        probe = aioredis.Redis.from_url(redis_server.url)
        try:
            assert 0 < await probe.pttl("test:cluster:c-silent") <= 600
        finally:
            await probe.aclose()
        await eventually(
            lambda: a.get("c-silent") is None and b.get("c-silent") is None,
            within=3.0,
            what="expiry everywhere",
        )


async def test_redis_outage_keeps_the_local_cache_and_the_view_recovers(tmp_path: Path) -> None:
    srv = start_redis(tmp_path)
    try:
        async with view(srv.url, ttl_s=30.0) as a, view(srv.url, ttl_s=30.0) as b:
            await a.publish(state("c-a"))
            await eventually(lambda: b.get("c-a") is not None, what="b sees c-a")
            port = srv.port
            srv.stop()  # Redis is gone
            await a.publish(state("c-a", seq=2))  # must not raise
            assert a.get("c-a").seq == 2  # type: ignore[union-attr]
            await asyncio.sleep(0.6)  # several failed rescans
            assert not a.redis_ok and not b.redis_ok
            assert b.get("c-a") is not None, "b keeps its cache while Redis is down"
            with pytest.raises(FleetViewError):
                await a.set_router_drain("c-a", True)
            assert not a.router_drained("c-a")
            srv = _restart_redis_on(port, tmp_path)  # an empty Redis comes back
            await a.publish(state("c-a", seq=3))
            await eventually(lambda: a.redis_ok, within=5.0, what="a reconnects")
            await eventually(lambda: b.get("c-a").seq == 3, within=5.0, what="b converges")  # type: ignore[union-attr]
            assert b.redis_ok
    finally:
        srv.stop()


def _restart_redis_on(port: int, tmp: Path) -> RedisServer:
    return start_redis(tmp, port=port)


async def test_capacity_server_publishes_through_redis_to_a_second_replica(redis_server: RedisServer) -> None:
    async with (
        view(redis_server.url) as a,
        view(redis_server.url) as b,
        running_server(fleet=a) as (_, port, _),
    ):
        async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as ch:
            call = capacity_pb2_grpc.CapacityServiceStub(ch).Report(
                metadata=(("authorization", f"Bearer {TOKEN_A}"),), timeout=5
            )
            await call.write(report("c-a", seq=4))
            await call.read()
            await call.done_writing()
        await eventually(lambda: b.get("c-a") is not None, what="replica b sees the report")
        assert b.get("c-a").seq == 4  # type: ignore[union-attr]


async def test_a_replica_started_while_redis_is_down_serves_locally_and_joins_later(tmp_path: Path) -> None:
    port = free_port()
    url = f"redis://127.0.0.1:{port}/0"
    async with view(url) as a:  # Redis is not there yet: start() must not fail
        assert not a.redis_ok
        await a.publish(state("c-a", seq=1))
        assert a.get("c-a") is not None
        srv = _restart_redis_on(port, tmp_path)
        try:
            async with view(url) as b:
                await a.publish(state("c-a", seq=2))
                await eventually(lambda: a.redis_ok, within=5.0, what="a reaches Redis")
                await eventually(lambda: b.get("c-a") is not None, within=5.0, what="b sees c-a")
                await b.publish(state("c-b", seq=1))
                await eventually(lambda: a.get("c-b") is not None, within=5.0, what="a subscribed after all")
        finally:
            srv.stop()
