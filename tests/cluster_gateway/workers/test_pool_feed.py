"""The pool feed over a real Unix socket: a worker's replica follows the gateway's pool, and the
gateway and every worker see each other's in-flight requests and ejections within a few ticks."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path

from cluster_gateway.pool import Endpoint, EndpointPool, PodMetrics
from cluster_gateway.workers.publisher import PoolPublisher
from cluster_gateway.workers.replica import PoolReplica


async def eventually(cond: Callable[[], bool], within_s: float = 10.0) -> None:
    deadline = time.monotonic() + within_s
    while not cond():
        assert time.monotonic() < deadline, "condition not met in time"
        await asyncio.sleep(0.01)


def gateway_pool() -> EndpointPool:
    pool = EndpointPool()
    pool.set_endpoints([Endpoint("a", "127.0.0.1", 9001), Endpoint("b", "127.0.0.1", 9002)])
    pool.record_scrape("a", PodMetrics(engine="vllm", waiting=3, running=2, kv_usage=0.5, scraped_at=1.0))
    pool.set_catalog("a", ["llama"], {"sql-lora": "llama"})
    return pool


@asynccontextmanager
async def fed(
    tmp_path: Path, n: int = 1
) -> AsyncIterator[tuple[EndpointPool, PoolPublisher, list[EndpointPool]]]:
    pool = gateway_pool()
    pub = PoolPublisher(pool, str(tmp_path / "feed.sock"))
    await pub.start()
    publishing = asyncio.create_task(pub.run())
    replicas = [EndpointPool() for _ in range(n)]
    feeds = [PoolReplica(r, pub.path, i + 1, lambda: {"llama": 2}) for i, r in enumerate(replicas)]
    tasks = [asyncio.create_task(f.run()) for f in feeds]
    try:
        for f in feeds:
            await asyncio.wait_for(f.synced.wait(), 10)
        yield pool, pub, replicas
    finally:
        for t in [*tasks, publishing]:
            t.cancel()
        await asyncio.gather(*tasks, publishing, return_exceptions=True)
        await pub.stop()


async def test_a_replica_copies_membership_metrics_and_catalog(tmp_path: Path) -> None:
    async with fed(tmp_path) as (pool, _pub, (replica,)):
        a = replica.get("a")
        assert a is not None and a.metrics is not None
        assert (a.metrics.waiting, a.metrics.running, a.metrics.kv_usage) == (3, 2, 0.5)
        assert (
            a.base_models == {"llama"}
            and a.adapters == {"sql-lora"}
            and a.adapter_parents["sql-lora"] == "llama"
        )
        assert replica.catalog.is_adapter("sql-lora")
        pool.upsert(Endpoint("c", "127.0.0.1", 9003))  # discovery found a pod
        await eventually(lambda: replica.get("c") is not None)
        pool.remove("b")
        await eventually(lambda: replica.get("b") is None)


async def test_in_flight_counts_add_up_across_processes(tmp_path: Path) -> None:
    async with fed(tmp_path, n=2) as (pool, pub, (w1, w2)):
        for _ in range(3):
            w1.acquire("a")
        pool.acquire("a")  # the gateway process serves too
        await eventually(lambda: (pod := pool.get("a")) is not None and pod.inflight == 4)
        await eventually(lambda: (pod := w2.get("a")) is not None and pod.inflight == 4)
        p1 = w1.get("a")
        assert p1 is not None
        await eventually(lambda: p1.inflight == 4)
        assert p1.local_inflight == 3  # its own, exact
        assert pub.queued_by_model() == {"llama": 4}  # both workers' admission queues
        w1.release("a")
        await eventually(lambda: (pod := w2.get("a")) is not None and pod.inflight == 3)


async def test_a_worker_that_leaves_takes_its_in_flight_requests_with_it(tmp_path: Path) -> None:
    pool = gateway_pool()
    pub = PoolPublisher(pool, str(tmp_path / "feed.sock"))
    await pub.start()
    publishing = asyncio.create_task(pub.run())
    replica = EndpointPool()
    feed = PoolReplica(replica, pub.path, 1, dict)
    task = asyncio.create_task(feed.run())
    try:
        await asyncio.wait_for(feed.synced.wait(), 10)
        replica.acquire("a")
        replica.acquire("a")
        await eventually(lambda: (pod := pool.get("a")) is not None and pod.inflight == 2)
        task.cancel()  # the worker process died
        await asyncio.gather(task, return_exceptions=True)
        await eventually(lambda: (pod := pool.get("a")) is not None and pod.inflight == 0)
    finally:
        publishing.cancel()
        await asyncio.gather(publishing, return_exceptions=True)
        await pub.stop()


async def test_an_ejection_in_one_process_reaches_all(tmp_path: Path) -> None:
    async with fed(tmp_path, n=2) as (pool, _pub, (w1, w2)):
        p1 = w1.get("b")
        assert p1 is not None
        p1.ejected_until = time.monotonic() + 30.0  # w1's outlier detection ejected it
        await eventually(lambda: (pod := pool.get("b")) is not None and pod.ejected_until > time.monotonic())
        await eventually(lambda: (pod := w2.get("b")) is not None and pod.ejected_until > time.monotonic())


async def test_dispatches_since_the_last_scrape_are_shared_for_the_burst_guard(tmp_path: Path) -> None:
    async with fed(tmp_path, n=2) as (pool, _pub, (w1, w2)):
        for _ in range(5):
            w1.acquire("a")
        await eventually(lambda: (pod := w2.get("a")) is not None and pod.dispatched_since_scrape == 5)
        pool.record_scrape("a", PodMetrics(engine="vllm", waiting=0, running=5, scraped_at=2.0))
        await eventually(lambda: (pod := w2.get("a")) is not None and pod.dispatched_since_scrape == 0)


async def test_a_replica_copies_the_pods_annotations(tmp_path: Path) -> None:
    """precise_prefix finds a pod's KV-events endpoint in its annotations, in every worker too."""
    async with fed(tmp_path) as (pool, _pub, (replica,)):
        ann = {"fleetgate.io/kv-events-endpoint": "tcp://127.0.0.1:5557"}
        pool.upsert(Endpoint("c", "127.0.0.1", 9003, annotations=ann))
        await eventually(lambda: (c := replica.get("c")) is not None and c.endpoint.annotations == ann)
