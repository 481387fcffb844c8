"""The gateway's own Prometheus metrics and tracer, one registry per gateway instance.

A per-gateway `CollectorRegistry` lets tests, the demo and benchmarks run several gateways in one
process without metric-name clashes. Pool-derived gauges (stale pods, in-flight per pod) are read
from the pool at scrape time instead of being updated on the request path.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator

from opentelemetry import trace
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, Counter, Histogram, generate_latest
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

from cluster_gateway.pool import EndpointPool
from cluster_gateway.request_path.readiness import readiness

tracer = trace.get_tracer("fleetgate.cluster_gateway")

# Outcomes a request can end with (label `outcome`).
OK = "ok"
UPSTREAM_ERROR = "upstream_error"  # the pod answered 4xx/5xx (passed through)
FAILED = "failed"  # no pod could be reached / stream broke
SHED = "shed"  # refused by admission (429)
REJECTED = "rejected"  # bad request / unknown model / no endpoint (4xx/503 from the gateway)
CANCELLED = "cancelled"  # the client went away

_LATENCY_BUCKETS = (0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0)
_TTFT_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)


class _PoolCollector(Collector):
    """Reads the pool when Prometheus scrapes, so the hot path pays nothing for these gauges."""

    def __init__(self, pool: EndpointPool, queue_length: Callable[[], int]) -> None:
        self._pool = pool
        self._queue_length = queue_length

    def collect(self) -> Iterator[GaugeMetricFamily]:
        pods = self._pool.pods()
        stale = GaugeMetricFamily("fleetgate_gateway_stale_pods", "Pods whose metrics are stale")
        stale.add_metric([], sum(1 for p in pods if p.stale))
        yield stale
        now = time.monotonic()
        ejected = GaugeMetricFamily(
            "fleetgate_gateway_ejected_pods", "Pods ejected by outlier detection (their requests failed)"
        )
        ejected.add_metric([], sum(1 for p in pods if p.ejected_until > now))
        yield ejected
        degraded = GaugeMetricFamily(
            "fleetgate_gateway_degraded",
            "1 while no pod has fresh metrics and routing goes on over the last known state",
        )
        degraded.add_metric([], float(readiness(pods, now).degraded))
        yield degraded
        total = GaugeMetricFamily("fleetgate_gateway_pods", "Pods in the endpoint pool")
        total.add_metric([], len(pods))
        yield total
        inflight = GaugeMetricFamily(
            "fleetgate_gateway_inflight_requests",
            "Requests this gateway has in flight, per pod",
            labels=["pod"],
        )
        for p in pods:
            inflight.add_metric([p.name], p.inflight)
        yield inflight
        queue = GaugeMetricFamily(
            "fleetgate_gateway_admission_queue_length", "Requests waiting in the admission queue"
        )
        queue.add_metric([], self._queue_length())
        yield queue


class GatewayMetrics:
    """Counters and histograms the proxy and the ext_proc picker update."""

    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry if registry is not None else CollectorRegistry()
        self.requests = Counter(
            "fleetgate_gateway_requests",
            "Requests handled, by pod, routing profile and outcome",
            ["pod", "profile", "outcome"],
            registry=self.registry,
        )
        self.pick_latency = Histogram(
            "fleetgate_gateway_pick_seconds",
            "Time to choose a pod (scheduling, excluding admission queueing)",
            buckets=_LATENCY_BUCKETS,
            registry=self.registry,
        )
        self.queue_wait = Histogram(
            "fleetgate_gateway_admission_wait_seconds",
            "Time requests spent in the admission queue",
            buckets=_TTFT_BUCKETS,
            registry=self.registry,
        )
        self.ttft = Histogram(
            "fleetgate_gateway_ttft_seconds",
            "Time from forwarding to the first response byte from the pod",
            ["pod"],
            buckets=_TTFT_BUCKETS,
            registry=self.registry,
        )
        self.retries = Counter(
            "fleetgate_gateway_retries",
            "Attempts moved to another pod, by reason",
            ["reason"],
            registry=self.registry,
        )

        self.ejections = Counter(
            "fleetgate_gateway_pod_ejections",
            "Pods ejected by outlier detection, by reason",
            ["reason"],
            registry=self.registry,
        )
        self.retry_budget_exhausted = Counter(
            "fleetgate_gateway_retry_budget_exhausted",
            "Retries refused because the retry budget was spent",
            registry=self.registry,
        )

    def watch_pool(self, pool: EndpointPool, queue_length: Callable[[], int]) -> None:
        self.registry.register(_PoolCollector(pool, queue_length))

    def request_done(self, pod: str, profile: str, outcome: str) -> None:
        self.requests.labels(pod, profile, outcome).inc()

    def render(self) -> tuple[bytes, str]:
        return generate_latest(self.registry), CONTENT_TYPE_LATEST
