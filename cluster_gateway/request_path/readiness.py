"""Is this gateway ready to route, and is it routing on trust? One answer for `/ready` and metrics.

Suspect yourself first: when no pod has fresh metrics but every pod has *some* known state and
not every pod is ejected, the likeliest cause is this gateway (a starved event loop, its own
network) rather than a fleet that died in the same second. The scheduler then keeps routing on
the last known state (`HealthyFilter`/`FreshFilter` fail open, `ctx.degraded`), so `/ready` must
not take the gateway out of its Service at that moment — that would turn a slow scrape into an
outage. It answers 200 with `"degraded": true` instead, and `fleetgate_gateway_degraded` is 1.
Real request failures still eject pods (outlier detection); once every pod is ejected, or none
was ever scraped, the gateway is not ready.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from cluster_gateway.pool import PodState


@dataclass(frozen=True, slots=True)
class Readiness:
    pods: int
    ready_pods: int  # fresh metrics and not ejected
    degraded: bool  # no ready pod, routing goes on over the last known state

    @property
    def ready(self) -> bool:
        return self.ready_pods > 0 or self.degraded


def readiness(pods: Sequence[PodState], now: float) -> Readiness:
    ready = sum(1 for p in pods if not p.stale and p.ejected_until <= now)
    degraded = (
        ready == 0
        and bool(pods)
        and all(p.metrics is not None for p in pods)
        and any(p.ejected_until <= now for p in pods)
    )
    return Readiness(len(pods), ready, degraded)
