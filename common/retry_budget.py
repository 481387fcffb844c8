"""A sliding-window retry budget, shared by both tiers' forwarders.

Retries multiply load exactly when upstreams are struggling, so they are budgeted: over a sliding
window, retries may not exceed `ratio` x requests plus a small floor (`min_retries`) so a quiet
proxy can still fail over (Envoy's retry budget and Linkerd's have the same shape).
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable


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
