"""Glue for running a gateway from its CR: load the CR, and keep its status fed from the live pool.

`pool_health` is the one place that turns an EndpointPool into the status numbers, so the CR, the
printer columns and the conditions agree on what "ready" and "stale" mean (the agent's definition:
a pod is ready when its last good scrape is fresher than `scrape.maxStalenessMs`).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from dataclasses import dataclass

from kubernetes import client

from cluster_gateway.k8s.client import load_api_client
from cluster_gateway.k8s.crd_source import CrdConfigSource, GatewayResource, parse_resource_ref
from cluster_gateway.k8s.status import StatusReporter
from cluster_gateway.pool import EndpointPool


@dataclass(frozen=True, slots=True)
class PoolHealth:
    endpoints: int  # pods discovery put in the pool
    ready: int  # fresh metrics from the last good scrape
    stale: int  # the rest: never scraped, failing scrapes, or metrics too old


def pool_health(pool: EndpointPool, max_staleness_s: float, now: float | None = None) -> PoolHealth:
    at = time.monotonic() if now is None else now
    pods = pool.pods()
    ready = sum(
        1 for p in pods if not p.stale and p.metrics is not None and p.metrics_age(at) <= max_staleness_s
    )
    return PoolHealth(endpoints=len(pods), ready=ready, stale=len(pods) - ready)


async def publish_status(
    reporter: StatusReporter,
    pool: EndpointPool,
    *,
    max_staleness_s: float,
    router_connected: Callable[[], bool | None] = lambda: None,
    interval_s: float = 0.5,
) -> None:
    """Until cancelled: sample the pool every `interval_s` and hand the numbers to the reporter
    (which itself patches only on change, at most once per its interval)."""
    while True:
        h = pool_health(pool, max_staleness_s)
        await reporter.report(
            endpoints=h.endpoints, ready=h.ready, stale=h.stale, router_connected=router_connected()
        )
        await asyncio.sleep(interval_s)


async def load_gateway_from_cluster(
    ref: str, kubeconfig: str | None = None
) -> tuple[GatewayResource, client.ApiClient]:
    """`--crd NAMESPACE/NAME`: the validated CR and the API client to report its status with.

    Raises ConfigError (naming the resource and field) for a missing, unreadable or invalid CR.
    """
    namespace, name = parse_resource_ref(ref)
    api = load_api_client(kubeconfig, field="--kubeconfig")
    resource = await CrdConfigSource(api, namespace, name).load()
    return resource, api
