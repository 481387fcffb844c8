"""Request totals since start, per cluster and outcome, read back from the router's own counters.

The status page and `/fleet` show what Prometheus would: the same `fleetgate_router_requests` and
`fleetgate_router_ratelimit_decisions` counters, so the page and `/metrics` can never disagree.
Labels are looked up by name, so a counter that gains labels (model, tenant) still sums correctly.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from prometheus_client.registry import Collector

from global_router.metrics import CLIENT_ERROR, FAILED, REJECTED, STREAM_BROKEN, UPSTREAM_ERROR

NO_CLUSTER = "-"  # the `cluster` label of requests that never reached one
ERROR_OUTCOMES = frozenset({UPSTREAM_ERROR, FAILED, STREAM_BROKEN})


@dataclass(slots=True)
class RequestTotals:
    by_cluster: dict[str, dict[str, int]] = field(default_factory=dict)  # cluster -> outcome -> count
    rate_limited: int = 0  # refused by a tenant's rate limit (429)

    def cluster(self, cluster_id: str) -> dict[str, int]:
        """Outcome counts of requests sent to `cluster_id`: `routed`, `errors`, `client_errors` and each outcome."""
        outcomes = self.by_cluster.get(cluster_id, {})
        return {
            "routed": sum(outcomes.values()),
            "errors": sum(n for o, n in outcomes.items() if o in ERROR_OUTCOMES),
            "client_errors": outcomes.get(CLIENT_ERROR, 0),
            **outcomes,
        }

    def router(self) -> dict[str, int]:
        refused = self.by_cluster.get(NO_CLUSTER, {})
        routed = {c: o for c, o in self.by_cluster.items() if c != NO_CLUSTER}
        return {
            "requests": sum(sum(o.values()) for o in self.by_cluster.values()),
            "routed": sum(sum(o.values()) for o in routed.values()),
            # a request no cluster answered may carry no cluster: count its error here all the same
            "errors": sum(n for o in self.by_cluster.values() for k, n in o.items() if k in ERROR_OUTCOMES),
            "refused": refused.get(REJECTED, 0),  # auth, validation, no cluster, shed, rate limit
            "rate_limited": self.rate_limited,
        }


def _totals(counter: Collector) -> list[tuple[dict[str, str], int]]:
    return [
        (sample.labels, int(sample.value))
        for metric in counter.collect()
        for sample in metric.samples
        if sample.name.endswith("_total")
    ]


def request_totals(requests: Collector, ratelimit: Collector) -> RequestTotals:
    out = RequestTotals()
    for labels, n in _totals(requests):
        per = out.by_cluster.setdefault(labels.get("cluster", NO_CLUSTER), {})
        outcome = labels.get("outcome", "unknown")
        per[outcome] = per.get(outcome, 0) + n
    out.rate_limited = sum(n for labels, n in _totals(ratelimit) if labels.get("decision") != "allowed")
    return out
