"""A gateway run from its CR: spec loaded through a kubeconfig, status kept in step with the pool."""

from __future__ import annotations

import asyncio
import contextlib
import time
from pathlib import Path

import yaml

from cluster_gateway.k8s.status import StatusReporter
from cluster_gateway.k8s.status_loop import (
    PoolHealth,
    load_gateway_from_cluster,
    pool_health,
    publish_status,
)
from cluster_gateway.pool import Endpoint, EndpointPool, PodMetrics
from common.config.gateway import CRD_GROUP, CRD_KIND, CRD_PLURAL, CRD_VERSION
from tests.cluster_gateway.k8s.fake_apiserver import FakeApiServer, custom_collection
from tests.eventually import eventually

GATEWAYS = custom_collection(CRD_GROUP, CRD_VERSION, CRD_PLURAL)


def _pool(names: list[str]) -> EndpointPool:
    pool = EndpointPool()
    pool.set_endpoints(Endpoint(name=n, address="127.0.0.1", port=8000 + i) for i, n in enumerate(names))
    return pool


def _fresh(pool: EndpointPool, name: str, at: float | None = None) -> None:
    pool.record_scrape(name, PodMetrics(engine="vllm", scraped_at=time.monotonic() if at is None else at))


def test_pool_health_counts_ready_and_stale() -> None:
    pool = _pool(["fresh", "never-scraped", "old", "failing"])
    now = time.monotonic()
    _fresh(pool, "fresh", now - 0.1)
    _fresh(pool, "old", now - 5.0)
    _fresh(pool, "failing", now)
    pool.record_scrape_failure("failing", stale_after=1)
    assert pool_health(pool, max_staleness_s=1.0, now=now) == PoolHealth(endpoints=4, ready=1, stale=3)


async def test_status_follows_the_pool_of_a_gateway_loaded_from_its_cr(
    apiserver: FakeApiServer, tmp_path: Path
) -> None:
    apiserver.put(
        GATEWAYS,
        {
            "apiVersion": f"{CRD_GROUP}/{CRD_VERSION}",
            "kind": CRD_KIND,
            "metadata": {"name": "gw", "namespace": "prod"},
            "spec": {"clusterId": "c1", "discovery": {"static": {"endpoints": ["http://10.0.0.1:8000"]}}},
        },
    )
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(
        yaml.safe_dump(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "clusters": [{"name": "t", "cluster": {"server": apiserver.url}}],
                "users": [{"name": "u", "user": {"token": "x"}}],
                "contexts": [{"name": "t", "context": {"cluster": "t", "user": "u"}}],
                "current-context": "t",
            }
        )
    )
    resource, api = await load_gateway_from_cluster("prod/gw", str(kubeconfig))
    assert resource.spec.cluster_id == "c1" and resource.generation == 1

    pool = _pool(["a", "b"])
    _fresh(pool, "a")
    connected = [False]
    reporter = StatusReporter(
        api, resource.namespace, resource.name, generation=resource.generation, min_interval_s=0.1
    )
    task = asyncio.create_task(
        publish_status(
            reporter, pool, max_staleness_s=60.0, router_connected=lambda: connected[0], interval_s=0.02
        )
    )

    def status() -> dict[str, object]:
        obj = apiserver.get(GATEWAYS, "gw", "prod") or {}
        return obj.get("status") or {}

    try:
        await eventually(lambda: status().get("readyEndpoints") == 1, 1.0, "first status")
        assert (status()["endpoints"], status()["stalePods"], status()["routerConnected"]) == (2, 1, False)
        _fresh(pool, "b")
        connected[0] = True
        await eventually(lambda: status().get("readyEndpoints") == 2, 1.0, "status follows the pool")
        assert status()["routerConnected"] is True and status()["stalePods"] == 0
        await eventually(lambda: reporter.patches == 2, 1.0, "the reporter saw its patch succeed")
        patches = reporter.patches
        await asyncio.sleep(0.3)
        assert reporter.patches == patches, "a steady pool is not re-patched"
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
