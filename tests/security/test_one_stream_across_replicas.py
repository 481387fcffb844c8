"""Several router replicas: a cluster's second report stream is refused even on another replica
(a Redis lease per cluster), and a dead Redis leaves the per-replica rule in force (fail open)."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator

import grpc
import pytest
from prometheus_client import CollectorRegistry

from common.config.router import CapacityServer as CapacityServerConfig
from global_router.capacity_server import CapacityServer
from global_router.fleet_view import MemoryFleetView
from global_router.router import redis_client
from global_router.stream_lease import RedisStreamLease
from tests.conftest import RedisServer
from tests.security.test_capacity_reports_are_pinned import Clock, Stream, agents, report


@contextlib.asynccontextmanager
async def replica(redis_url: str, clock: Clock) -> AsyncIterator[tuple[CapacityServer, int]]:
    r = redis_client(redis_url, 0.5)
    lease = RedisStreamLease(r, prefix="t:", ttl_s=3.0, timeout_s=0.5)
    cfg = CapacityServerConfig(host="127.0.0.1", port=0, stale_after_s=3.0, agents=agents())
    srv = CapacityServer(
        cfg, MemoryFleetView(ttl_s=60), registry=CollectorRegistry(), clock=clock, lease=lease
    )
    port = await srv.start()
    try:
        yield srv, port
    finally:
        await srv.stop(grace=0.1)
        await r.aclose()


async def test_a_second_stream_on_another_replica_is_refused(redis_server: RedisServer) -> None:
    clock = Clock()
    async with (
        replica(redis_server.url, clock) as (a, port_a),
        replica(redis_server.url, clock) as (b, port_b),
    ):
        real = Stream(port_a)
        assert (await real.send(report(1))).ack.sequence == 1
        thief = Stream(port_b)
        try:
            with pytest.raises(grpc.aio.AioRpcError) as err:
                await thief.send(report(1000, headroom_requests=16))
            assert err.value.code() == grpc.StatusCode.ALREADY_EXISTS
            assert "another router replica" in (err.value.details() or "")
            assert b.connected_clusters() == []
            assert (await real.send(report(2))).ack.sequence == 2  # the real agent goes on
        finally:
            await thief.close()
        await real.close()
        # the holder left: its lease is released and a stream on the other replica is accepted
        for _ in range(100):
            if a.connected_clusters() == []:
                break
            await asyncio.sleep(0.02)
        standby = Stream(port_b)
        try:
            assert (await standby.send(report(1))).ack.sequence == 1
        finally:
            await standby.close()


async def test_a_dead_redis_fails_open_to_the_per_replica_rule() -> None:
    clock = Clock()
    async with replica("redis://127.0.0.1:9/0", clock) as (_, port):  # nothing listens on port 9
        first = Stream(port)
        try:
            assert (await first.send(report(1))).ack.sequence == 1
            second = Stream(port)
            with pytest.raises(grpc.aio.AioRpcError) as err:
                await second.send(report(5))
            assert err.value.code() == grpc.StatusCode.ALREADY_EXISTS  # still one per replica
            await second.close()
        finally:
            await first.close()
