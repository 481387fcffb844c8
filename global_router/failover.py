"""Failover policy: how many retries the fleet can afford, and which clusters to avoid for a while.

Retries multiply load exactly when a cluster is struggling, so they are budgeted: over a sliding
window, retries may not exceed `retryBudgetRatio` x requests plus a small floor (`minRetries`) so a
quiet router can still fail over. A cluster failing `ejectAfterFailures` times in a row is ejected
for `ejectBaseS`, doubling on each consecutive ejection up to `ejectMaxS`; one success clears it.
A request the cluster never acknowledged (`ackTimeoutS`: its data path is black-holed, whatever its
reports say) ejects it at once: each further request sent there would wait out the same deadline.
Both are per replica: they react to what this replica sees, within milliseconds, without Redis.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

from common.config.router import Failover
from common.retry_budget import RetryBudget

__all__ = ["ClusterHealth", "RetryBudget"]


@dataclass(slots=True)
class _Health:
    failures: int = 0  # consecutive
    ejections: int = 0  # consecutive ejections (sets the backoff)
    ejected_until: float = 0.0
    total_ejections: int = 0


class ClusterHealth:
    """Consecutive-failure ejection with exponential backoff, per cluster."""

    def __init__(self, cfg: Failover, clock: Callable[[], float] = time.monotonic) -> None:
        self._cfg = cfg
        self._clock = clock
        self._by_cluster: dict[str, _Health] = {}
        self.on_eject: Callable[[str, float], None] | None = None  # metrics hook: (cluster, seconds)

    def record_failure(self, cluster_id: str, *, eject: bool = False) -> bool:
        """Count a failure (`eject`: one that ejects at once); True if this one ejected the cluster."""
        h = self._by_cluster.setdefault(cluster_id, _Health())
        now = self._clock()
        if h.ejected_until > now:
            return False  # already out; traffic that still reached it (fail-open) doesn't extend it
        h.failures += 1
        if h.failures < self._cfg.eject_after_failures and not eject:
            return False
        duration = min(self._cfg.eject_max_s, self._cfg.eject_base_s * (2**h.ejections))
        h.ejections += 1
        h.total_ejections += 1
        h.failures = 0
        h.ejected_until = now + duration
        if self.on_eject is not None:
            self.on_eject(cluster_id, duration)
        return True

    def record_success(self, cluster_id: str) -> None:
        h = self._by_cluster.get(cluster_id)
        if h is not None:
            h.failures = 0
            h.ejections = 0
            h.ejected_until = 0.0

    def is_ejected(self, cluster_id: str) -> bool:
        h = self._by_cluster.get(cluster_id)
        return h is not None and h.ejected_until > self._clock()

    def ejected(self) -> dict[str, float]:
        """Ejected clusters → seconds until they are tried again."""
        now = self._clock()
        return {cid: h.ejected_until - now for cid, h in self._by_cluster.items() if h.ejected_until > now}

    def snapshot(self, cluster_id: str) -> dict[str, float | int]:
        h = self._by_cluster.get(cluster_id) or _Health()
        return {
            "consecutive_failures": h.failures,
            "ejected_for_s": round(max(0.0, h.ejected_until - self._clock()), 3),
            "ejections": h.total_ejections,
        }
