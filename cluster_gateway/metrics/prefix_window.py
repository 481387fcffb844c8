"""A pod's prefix-cache hit rate over the last few seconds, from its cumulative counters.

vLLM exports lifetime hit/query counters: their ratio soon stops moving, while routing cares about
what the cache does now. Keeping a short history of readings per pod gives the recent ratio.
"""

from __future__ import annotations

from collections import deque

from cluster_gateway.metrics.engines import PrefixCounters

__all__ = ["PrefixHitWindow"]


class PrefixHitWindow:
    """Hit rate over the last `window_s` seconds; falls back to the lifetime rate when unknown."""

    def __init__(self, window_s: float = 10.0) -> None:
        self.window_s = window_s
        self._readings: dict[str, deque[tuple[float, PrefixCounters]]] = {}

    def update(self, pod: str, now: float, counters: PrefixCounters, lifetime: float | None) -> float | None:
        readings = self._readings.setdefault(pod, deque())
        if readings and counters.queries < readings[-1][1].queries:
            readings.clear()  # the counters went back: the server restarted
        readings.append((now, counters))
        while len(readings) > 2 and now - readings[1][0] >= self.window_s:
            readings.popleft()  # keep one reading at or beyond the window's start
        oldest = readings[0][1]
        queries = counters.queries - oldest.queries
        if queries <= 0:
            return lifetime  # no query in the window: the recent rate is unknown
        return min(1.0, max(0.0, (counters.hits - oldest.hits) / queries))

    def forget(self, pod: str) -> None:
        self._readings.pop(pod, None)
