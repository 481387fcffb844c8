"""The fleet as this replica sees it, as one JSON-ready document (served on `/fleet`, drawn by `/`)."""

from __future__ import annotations

import time
from typing import Any

from global_router.dispatch_tracker import DispatchTracker
from global_router.failover import ClusterHealth, RetryBudget
from global_router.fleet_view import ClusterState
from global_router.metrics import RateMeter
from global_router.request_totals import RequestTotals


def fleet_report(
    clusters: list[ClusterState],
    *,
    stale_after_s: float,
    health: ClusterHealth,
    tracker: DispatchTracker,
    rates: RateMeter,
    budget: RetryBudget,
    router: dict[str, Any],
    totals: RequestTotals | None = None,
    now: float | None = None,
) -> dict[str, Any]:
    """`totals` (the router's request counters) adds per-cluster and router-wide outcome counts."""
    now = time.time() if now is None else now
    totals = totals if totals is not None else RequestTotals()
    out: list[dict[str, Any]] = []
    regions: dict[str, list[str]] = {}
    for c in sorted(clusters, key=lambda c: (c.region, c.cluster_id)):
        age = c.age(now)
        regions.setdefault(c.region, []).append(c.cluster_id)
        out.append(
            {
                "id": c.cluster_id,
                "region": c.region,
                "zone": c.zone,
                "gateway_url": c.gateway_url,
                "seq": c.seq,
                "age_s": round(age, 3),
                "fresh": age <= stale_after_s,
                "stale": age > stale_after_s,  # still routed (on aged figures) until forgetAfterS
                "draining": c.draining,
                "router_drain": c.router_drain,
                "capacity_type": c.capacity_type,
                "cost_per_gpu_hour": c.cost_per_gpu_hour,
                "gpus": c.gpus,
                **health.snapshot(c.cluster_id),
                "inflight": tracker.inflight(c.cluster_id),
                "dispatched_since_report": tracker.dispatched_since(c.cluster_id, c.seq),
                "requests_total": tracker.total(c.cluster_id),
                "rate_rps": round(rates.rate(c.cluster_id), 2),
                "outcomes": totals.cluster(c.cluster_id),
                "models": {
                    name: {
                        "ready_pods": m.ready_pods,
                        "saturated_pods": m.saturated_pods,
                        "headroom_requests": m.headroom_requests,
                        "queued": m.queued,
                        "running": m.running,
                        "kv_headroom": round(m.kv_headroom, 3),
                        "est_ttft_ms": round(m.est_ttft_ms, 1),
                        "tokens_per_s": round(m.tokens_per_s, 1),
                        "gpu_tokens_per_s": round(m.gpu_tokens_per_s, 1),
                        "adapters": sorted(m.adapters),
                        "adapters_resident": sorted(m.adapters_resident),
                    }
                    for name, m in sorted(c.models.items())
                },
            }
        )
    return {
        "router": {
            **router,
            "retry_budget_available": round(budget.available(), 1),
            "retry_budget_window_s": budget.window_s,
            "rate_window_s": rates.window_s,
            "totals": totals.router(),
        },
        "clusters": out,
        "regions": regions,
        "generated_at": now,
    }
