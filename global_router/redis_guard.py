"""How long to wait for Redis, and when to stop asking: an adaptive timeout and a circuit breaker.

A fixed 0.25 s timeout turned 300 ms of Redis latency into a timeout per request, each timeout into
a reconnect, and each into a second of local mode starting from a full bucket (issue 13). Here the
timeout follows the measured round trip — `timeout = clamp(3 x p99 of recent calls, floor, ceiling)`,
a timed-out call counting as a sample of at least its timeout, so the estimate grows toward a slow
Redis instead of failing against it — and failures open a breaker: `breakerFailures` in a row send
every request to the fallback for `breakerOpenS` (doubling per failed probe up to `breakerMaxOpenS`),
then one request probes Redis with the ceiling timeout (half-open) while the others stay on the
fallback; its success closes the breaker. Admission scripts are not idempotent, so a call that timed
out is never re-sent: the breaker is the retry policy.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable
from typing import Literal

Route = Literal["redis", "probe", "fallback"]


class LatencyTracker:
    """Recent Redis round trips (seconds) and the timeout they imply."""

    def __init__(self, floor_s: float, ceiling_s: float, window: int = 256, factor: float = 3.0) -> None:
        self.floor_s = floor_s
        self.ceiling_s = max(ceiling_s, floor_s)
        self.factor = factor
        self._samples: deque[float] = deque(maxlen=window)
        self._timeout = floor_s

    def observe(self, seconds: float) -> None:
        self._samples.append(seconds)
        ordered = sorted(self._samples)
        p99 = ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))]
        self._timeout = min(self.ceiling_s, max(self.floor_s, self.factor * p99))

    def timeout(self) -> float:
        return self._timeout

    def p99(self) -> float:
        if not self._samples:
            return 0.0
        ordered = sorted(self._samples)
        return ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))]


class CircuitBreaker:
    """closed → open after `failures` in a row → half-open (one probe) → closed or open again."""

    def __init__(
        self,
        failures: int,
        open_s: float,
        max_open_s: float,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.failures_to_open = failures
        self.base_open_s = open_s
        self.max_open_s = max(max_open_s, open_s)
        self._clock = clock
        self._failures = 0
        self._open_s = open_s
        self._open_until = 0.0
        self._probing = False
        self.state: Literal["closed", "open", "half-open"] = "closed"
        self.epoch = 0  # +1 each time the breaker opens: fallback state of an older outage is void
        self.opened_total = 0

    def route(self) -> Route:
        """Where this call goes: Redis, Redis as the half-open probe, or the fallback."""
        if self.state == "closed":
            return "redis"
        if self.state == "open" and self._clock() >= self._open_until:
            self.state = "half-open"
        if self.state == "half-open" and not self._probing:
            self._probing = True
            return "probe"
        return "fallback"

    def success(self, route: Route) -> bool:
        """Record a good answer; returns True if this closed the breaker (Redis is back)."""
        self._failures = 0
        if route == "probe":
            self._probing = False
        if self.state != "closed" and route == "probe":
            self.state = "closed"
            self._open_s = self.base_open_s
            return True
        return False

    def failure(self, route: Route) -> bool:
        """Record a failed call; returns True if this opened the breaker."""
        if route == "probe":
            self._probing = False
            self._open(double=True)
            return True
        if self.state != "closed":
            return False  # a call that left before the breaker opened
        self._failures += 1
        if self._failures >= self.failures_to_open:
            self._open(double=False)
            return True
        return False

    def _open(self, *, double: bool) -> None:
        if double:
            self._open_s = min(self.max_open_s, self._open_s * 2)
        if self.state == "closed":
            self.epoch += 1
            self.opened_total += 1
        self.state = "open"
        self._failures = 0
        self._open_until = self._clock() + self._open_s
