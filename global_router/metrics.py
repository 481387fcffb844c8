"""The router's Prometheus metrics (one registry per router, so several replicas fit in one process)
and the short-window request rates shown on `/fleet`."""

from __future__ import annotations

import time
from collections.abc import Callable

from prometheus_client import CollectorRegistry, Counter, Gauge

from common.fast_metrics import FastCounter, FastHistogram
from common.genai_metrics import DURATION_BUCKETS, TOKEN_BUCKETS, TPOT_BUCKETS, TTFT_BUCKETS, LabelCap
from common.request_log import RequestRecord

# request outcomes
OK = "ok"
CLIENT_ERROR = "client_error"  # 4xx from upstream, passed through
UPSTREAM_ERROR = "upstream_error"  # 5xx/429 passed through after failover ran out
FAILED = "failed"  # no cluster answered
STREAM_BROKEN = "stream_broken"  # the stream died after bytes reached the client
CANCELLED = "cancelled"  # the client went away
REJECTED = "rejected"  # refused by the router (auth, validation, selection, rate limit)


class RouterMetrics:
    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry if registry is not None else CollectorRegistry()
        r = self.registry
        # the per-request series are lock-free dict updates (common.fast_metrics: ~0.4 µs against
        # prometheus_client's ~4-8 µs with labels(); a proxied request observes several)
        self.requests = FastCounter(
            "fleetgate_router_requests",
            "Requests finished by the global router",
            ["cluster", "traffic_class", "outcome"],
            registry=r,
        )
        self.failovers = Counter(
            "fleetgate_router_failovers",
            "Attempts moved to the next-ranked cluster",
            ["from_cluster", "reason"],
            registry=r,
        )
        self.retry_budget_exhausted = Counter(
            "fleetgate_router_retry_budget_exhausted",
            "Failovers refused because the retry budget was spent",
            registry=r,
        )
        self.ejections = Counter(
            "fleetgate_router_ejections",
            "Clusters ejected after consecutive failures",
            ["cluster"],
            registry=r,
        )
        self.ratelimit = FastCounter(
            "fleetgate_router_ratelimit_decisions",
            "Rate-limit decisions by tenant and result",
            ["tenant", "decision"],
            registry=r,
        )
        self.selection_seconds = FastHistogram(
            "fleetgate_router_selection_seconds",
            "Time to rank clusters for a request",
            [],
            buckets=(0.00005, 0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.05),
            registry=r,
        ).labels()
        self.ttfb_seconds = FastHistogram(
            "fleetgate_router_upstream_ttfb_seconds",
            "Time from forwarding to the first response byte from the cluster gateway",
            ["cluster"],
            buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30),
            registry=r,
        )
        self.inflight = Gauge(
            "fleetgate_router_inflight", "Requests in flight per cluster", ["cluster"], registry=r
        )
        self.fresh_clusters = Gauge(
            "fleetgate_router_fresh_clusters", "Clusters with a fresh capacity report", registry=r
        )
        self.stale_clusters = Gauge(
            "fleetgate_router_stale_clusters",
            "Clusters routed to on a stale report (older than staleAfterS, not yet forgotten)",
            registry=r,
        )
        self.report_age = Gauge(
            "fleetgate_router_cluster_report_age_seconds",
            "Age of each known cluster's latest capacity report",
            ["cluster"],
            registry=r,
        )
        self.cluster_stale = Gauge(
            "fleetgate_router_cluster_stale",
            "1 while the cluster is routed to on a stale report",
            ["cluster"],
            registry=r,
        )
        self.genai = GenAIMetrics(r)


_GENAI = ["gen_ai_operation_name", "gen_ai_request_model", "tenant", "traffic_class", "cluster"]


class GenAIMetrics:
    """The OpenTelemetry GenAI series of the router (see `common.genai_metrics`), by model, tenant,
    traffic class and the cluster that answered, filled once per request from its access-log record."""

    def __init__(self, r: CollectorRegistry) -> None:
        self.duration = FastHistogram(
            "gen_ai_server_request_duration_seconds",
            "End-to-end request duration at the global router (error_type empty when it succeeded)",
            [*_GENAI, "error_type"],
            buckets=DURATION_BUCKETS,
            registry=r,
        )
        self.ttft = FastHistogram(
            "gen_ai_server_time_to_first_token_seconds",
            "Time from the request's arrival to the first response byte sent to the client",
            _GENAI,
            buckets=TTFT_BUCKETS,
            registry=r,
        )
        self.tpot = FastHistogram(
            "gen_ai_server_time_per_output_token_seconds",
            "Mean time per output token after the first, per streamed request",
            _GENAI,
            buckets=TPOT_BUCKETS,
            registry=r,
        )
        self.tokens = FastHistogram(
            "gen_ai_client_token_usage",
            "Tokens per request by type (input = prompt, output = completion), from the model server's usage",
            [*_GENAI, "gen_ai_token_type"],
            buckets=TOKEN_BUCKETS,
            registry=r,
        )
        self.models = LabelCap()

    def observe(self, rec: RequestRecord, operation: str, ok: bool, now: float) -> None:
        """One finished request. Rejected requests carry model "-": a client-chosen name that was
        never routed must not become a series (`LabelCap` bounds the rest)."""
        model = self.models.value(rec.model) if rec.target != "-" else "-"
        labels = (operation, model, rec.tenant, rec.traffic_class, rec.target)
        duration = now - rec.started
        self.duration.labels(*labels, "" if ok else rec.outcome).observe(duration)
        if not ok:
            return
        if rec.ttft_s is not None:
            self.ttft.labels(*labels).observe(rec.ttft_s)
        if rec.prompt_tokens is not None and rec.completion_tokens is not None:
            self.tokens.labels(*labels, "input").observe(rec.prompt_tokens)
            self.tokens.labels(*labels, "output").observe(rec.completion_tokens)
            if rec.stream and rec.ttft_s is not None and rec.completion_tokens > 1:
                self.tpot.labels(*labels).observe((duration - rec.ttft_s) / (rec.completion_tokens - 1))


class RateMeter:
    """Requests per second per key over the last `window_s`, in one-second buckets (O(1) memory)."""

    def __init__(self, window_s: int = 10, clock: Callable[[], float] = time.monotonic) -> None:
        self.window_s = window_s
        self._clock = clock
        self._buckets: dict[str, dict[int, int]] = {}

    def mark(self, key: str) -> None:
        sec = int(self._clock())
        b = self._buckets.setdefault(key, {})
        b[sec] = b.get(sec, 0) + 1
        if len(b) > self.window_s + 2:
            for old in [s for s in b if s <= sec - self.window_s]:
                del b[old]

    def rate(self, key: str) -> float:
        sec = int(self._clock())
        b = self._buckets.get(key)
        if not b:
            return 0.0
        total = sum(n for s, n in b.items() if sec - self.window_s < s <= sec)
        return total / self.window_s
