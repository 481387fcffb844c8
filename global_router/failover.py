"""Failover policy: how many retries the fleet can afford, and which clusters to avoid for a while.

Retries multiply load exactly when a cluster is struggling, so they are budgeted: over a sliding
window, retries may not exceed `retryBudgetRatio` x requests plus a small floor (`minRetries`) so a
quiet router can still fail over. A cluster failing `ejectAfterFailures` times in a row is ejected
for `ejectBaseS`, doubling on each consecutive ejection up to `ejectMaxS`; one success clears it.
Both are per replica: they react to what this replica sees, within milliseconds, without Redis.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass

from common.config.router import Failover


class RetryBudget:
    """Sliding-window budget: retries ≤ ratio x requests + min_retries within `window_s`."""

    def __init__(
        self,
        ratio: float,
        *,
        min_retries: int = 5,
        window_s: float = 10.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.ratio = ratio
        self.min_retries = min_retries
        self.window_s = window_s
        self._clock = clock
        self._requests: deque[float] = deque()
        self._retries: deque[float] = deque()

    def _trim(self, now: float) -> None:
        edge = now - self.window_s
        for q in (self._requests, self._retries):
            while q and q[0] < edge:
                q.popleft()

    def record_request(self) -> None:
        now = self._clock()
        self._trim(now)
        self._requests.append(now)

    def try_retry(self) -> bool:
        """Spend one retry if the budget allows it."""
        now = self._clock()
        self._trim(now)
        if len(self._retries) + 1 > self.ratio * len(self._requests) + self.min_retries:
            return False
        self._retries.append(now)
        return True

    def available(self) -> float:
        self._trim(self._clock())
        return max(0.0, self.ratio * len(self._requests) + self.min_retries - len(self._retries))


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

    def record_failure(self, cluster_id: str) -> bool:
        """Count a failure; returns True if this one ejected the cluster."""
        h = self._by_cluster.setdefault(cluster_id, _Health())
        now = self._clock()
        if h.ejected_until > now:
            return False  # already out; traffic that still reached it (fail-open) doesn't extend it
        h.failures += 1
        if h.failures < self._cfg.eject_after_failures:
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
