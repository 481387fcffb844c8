"""The gateway's own Prometheus metrics and tracer, one registry per gateway instance.

A per-gateway `CollectorRegistry` lets tests, the demo and benchmarks run several gateways in one
process without metric-name clashes. Pool-derived gauges (stale pods, in-flight per pod) are read
from the pool at scrape time instead of being updated on the request path.

Per-pod series leave with their pod: every render first drops the children whose `pod` label
names a pod no longer in the pool (`prune`), so rollouts that rename pods do not grow the body
without bound. A render runs in a thread (`render_async`), so a large pool's render does not hold
the event loop that picks and forwards, and is reused for 20x as long as it took, at most
`RENDER_CACHE_S`: however many scrapers ask, rendering costs at most ~5% of a core, and a small
gateway (a render of a few ms) still answers with current values (docs/observability.md).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable, Iterator

from opentelemetry import trace
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, Counter, Histogram, generate_latest
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

from cluster_gateway.pool import EndpointPool
from cluster_gateway.request_path.readiness import readiness
from cluster_gateway.workers.metrics_feed import (
    MergedRegistry,
    ProcessGroupMetrics,
    ShippedSample,
    counter_samples,
)
from common.fast_metrics import FastCounter, FastHistogram
from common.genai_metrics import DURATION_BUCKETS, TOKEN_BUCKETS, TTFT_BUCKETS, LabelCap
from common.request_log import RequestRecord

tracer = trace.get_tracer("fleetgate.cluster_gateway")
log = logging.getLogger("fleetgate.gateway.metrics")

# Outcomes a request can end with (label `outcome`).
OK = "ok"
UPSTREAM_ERROR = "upstream_error"  # the pod answered 4xx/5xx (passed through)
FAILED = "failed"  # no pod could be reached / stream broke
SHED = "shed"  # refused by admission (429)
REJECTED = "rejected"  # bad request / unknown model / no endpoint (4xx/503 from the gateway)
CANCELLED = "cancelled"  # the client went away

RENDER_CACHE_S = 1.0
_CACHE_PER_RENDER_S = 20.0  # a render is reused for this many times its own duration (≤ RENDER_CACHE_S)
_NO_POD = "-"

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

        # GenAI series by model (a histogram per pod would be ~70 lines per pod: 70k at 1,000 pods);
        # per pod, only token counters
        genai = ["gen_ai_operation_name", "gen_ai_request_model"]
        self.request_duration = FastHistogram(
            "gen_ai_server_request_duration_seconds",
            "Request duration at the gateway, arrival to last byte (error_type empty when it succeeded)",
            [*genai, "error_type"],
            DURATION_BUCKETS,
            registry=self.registry,
        )
        self.request_ttft = FastHistogram(
            "gen_ai_server_time_to_first_token_seconds",
            "Time from the request's arrival at the gateway (admission queue included) to its first byte",
            genai,
            TTFT_BUCKETS,
            registry=self.registry,
        )
        self.token_usage = FastHistogram(
            "gen_ai_client_token_usage",
            "Tokens per request by type (input = prompt, output = completion), from the pod's usage",
            [*genai, "gen_ai_token_type"],
            TOKEN_BUCKETS,
            registry=self.registry,
        )
        self.pod_tokens = FastCounter(
            "fleetgate_gateway_tokens",
            "Tokens served per pod by type (input = prompt, output = completion), from the pod's usage",
            ["pod", "gen_ai_request_model", "gen_ai_token_type"],
            registry=self.registry,
        )
        self._models = LabelCap()
        self._pool: EndpointPool | None = None
        self._clock: Callable[[], float] = time.monotonic  # tests inject both
        self._timer: Callable[[], float] = time.perf_counter
        self._cached: tuple[float, bytes] | None = None
        self._rendering: asyncio.Future[bytes] | None = None
        # --workers (cluster_gateway/workers/metrics_feed.py): the gateway process adds its workers'
        # samples (`group`); a worker serves the gateway process's aggregate (`remote_render`)
        self.group: ProcessGroupMetrics | None = None
        self.remote_render: Callable[[], Awaitable[bytes]] | None = None

    def watch_pool(self, pool: EndpointPool, queue_length: Callable[[], int]) -> None:
        self._pool = pool
        self.registry.register(_PoolCollector(pool, queue_length))

    def request_done(self, pod: str, profile: str, outcome: str) -> None:
        self.requests.labels(pod, profile, outcome).inc()

    def request_finished(self, rec: RequestRecord, operation: str) -> None:
        """The GenAI series of one proxied request, from its access-log record. A request no pod
        took has model "-": a client-chosen name that was never routed must not become a series."""
        pod = rec.target
        model = self._models.value(rec.model) if pod != _NO_POD else _NO_POD
        ok = rec.outcome == OK
        duration = time.monotonic() - rec.started
        self.request_duration.labels(operation, model, "" if ok else rec.outcome).observe(duration)
        if not ok:
            return
        if rec.ttft_s is not None:
            self.request_ttft.labels(operation, model).observe(rec.ttft_s)
        if rec.prompt_tokens is not None and rec.completion_tokens is not None:
            self.token_usage.labels(operation, model, "input").observe(rec.prompt_tokens)
            self.token_usage.labels(operation, model, "output").observe(rec.completion_tokens)
            self.pod_tokens.inc((pod, model, "input"), rec.prompt_tokens)
            self.pod_tokens.inc((pod, model, "output"), rec.completion_tokens)

    def prune(self) -> int:
        """Drop every per-pod series of pods that left the pool; returns how many went."""
        if self._pool is None:
            return 0
        live = {p.name for p in self._pool.pods()}
        live.add(_NO_POD)
        keep = live.__contains__
        dropped = 0
        dropped += self.pod_tokens.retain("pod", keep)
        for metric, index in ((self.requests, 0), (self.ttft, 0)):
            for values in [v for v in metric._metrics if v[index] not in live]:
                metric.remove(*values)
                dropped += 1
        return dropped

    def shipped_samples(self) -> list[ShippedSample]:
        """A worker's counters for the gateway process (departed pods' series pruned first)."""
        self.prune()
        return counter_samples(self.registry)

    def _keep(self, labels: dict[str, str]) -> bool:
        pod = labels.get("pod")
        return pod is None or pod == _NO_POD or (self._pool is not None and self._pool.get(pod) is not None)

    def _renderable(self) -> CollectorRegistry | MergedRegistry:
        if self.group is None:
            return self.registry
        self.group.prune(self._keep)
        return MergedRegistry(self.registry, self.group, self._keep)

    def render(self) -> tuple[bytes, str]:
        self.prune()
        return generate_latest(self._renderable()), CONTENT_TYPE_LATEST  # type: ignore[arg-type]

    async def render_async(self) -> tuple[bytes, str]:
        """`render()` computed in a thread and reused for a while (see the module docstring);
        concurrent scrapes share one render. `_cached` = (valid until, body)."""
        if self.remote_render is not None:  # a worker: the whole group's body, from the gateway process
            try:
                return await self.remote_render(), CONTENT_TYPE_LATEST
            except TimeoutError:  # the gateway process did not answer in time: this process's own
                log.warning("no /metrics aggregate from the gateway process; serving this worker's own")
                self.prune()
                return generate_latest(self.registry), CONTENT_TYPE_LATEST
        now = self._clock()
        if self._cached is not None and now < self._cached[0]:
            return self._cached[1], CONTENT_TYPE_LATEST
        if self._rendering is None:
            self._rendering = asyncio.ensure_future(self._render_in_thread(now))
        fut = self._rendering
        return await asyncio.shield(fut), CONTENT_TYPE_LATEST

    async def _render_in_thread(self, now: float) -> bytes:
        try:
            self.prune()  # on the loop: it mutates what requests also touch
            t0 = self._timer()
            body = await asyncio.to_thread(generate_latest, self._renderable())  # type: ignore[arg-type]
            took = self._timer() - t0
            self._cached = (now + min(RENDER_CACHE_S, _CACHE_PER_RENDER_S * took), body)
            return body
        finally:
            self._rendering = None
