"""Measures Kubernetes discovery against the emulated API server (not collected by pytest).

    .venv/bin/python -m tests.cluster_gateway.discovery.measure_watch_latency

Prints, per pool size: initial paginated list → pool time, and ADDED-event → pool-membership latency.
"""

from __future__ import annotations

import asyncio
import statistics
import time

from kubernetes import client

from cluster_gateway.discovery.kubernetes import KubernetesSource
from cluster_gateway.pool import EndpointPool
from common.config.gateway import KubernetesDiscovery, LabelSelector
from tests.cluster_gateway.k8s.fake_apiserver import FakeApiServer, make_pod

APP = {"app": "x"}


async def measure(pods: int, events: int) -> str:
    server = FakeApiServer()
    await server.start()
    try:
        for i in range(pods):
            server.put_pod(make_pod(f"p{i}", f"10.{i // 65536}.{(i // 256) % 256}.{i % 256}", labels=APP))
        api = client.ApiClient(client.Configuration(host=server.url))
        source = KubernetesSource(KubernetesDiscovery(selector=LabelSelector(match_labels=APP)), api)
        pool = EndpointPool()
        started = time.perf_counter()
        task = asyncio.create_task(source.run(pool))
        while len(pool) < pods or server.open_watches < 1:  # noqa: ASYNC110 (polling is the measurement)
            await asyncio.sleep(0.001)
        list_ms = (time.perf_counter() - started) * 1000
        latencies = []
        for i in range(events):
            name = f"new{i}"
            t = time.perf_counter()
            server.put_pod(make_pod(name, "10.200.0.1", labels=APP))
            while pool.get(name) is None:  # noqa: ASYNC110
                await asyncio.sleep(0)
            latencies.append((time.perf_counter() - t) * 1000)
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
    finally:
        await server.stop()
    latencies.sort()
    p99 = latencies[max(0, int(len(latencies) * 0.99) - 1)]
    return (
        f"pods={pods}: list+watch ready in {list_ms:.0f} ms; {events} ADDED events -> pool: "
        f"p50 {statistics.median(latencies):.2f} ms, p99 {p99:.2f} ms, max {latencies[-1]:.2f} ms"
    )


def main() -> None:
    for pods in (100, 2000):
        print(asyncio.run(measure(pods, 200)))


if __name__ == "__main__":
    main()
