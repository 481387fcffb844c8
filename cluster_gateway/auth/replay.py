"""Nonces seen inside the signature window, so a captured signed request cannot be sent twice.

Bounded: entries leave when their timestamp falls out of the window, and if the cache is full the
oldest is evicted and every timestamp up to its own is refused from then on (a floor), so
eviction never reopens a replay; it can only refuse a late legitimate request under extreme rates.
Per process: HA replicas each keep their own (docs/security.md says what that leaves open).
"""

from __future__ import annotations

from collections import deque


class ReplayCache:
    def __init__(self, window_s: int, max_entries: int) -> None:
        self._window = window_s
        self._max = max_entries
        self._order: deque[tuple[int, str]] = deque()  # (timestamp, nonce), oldest first
        self._seen: set[str] = set()
        self._floor = -(2**62)  # timestamps at or below were evicted: refuse them

    def __len__(self) -> int:
        return len(self._seen)

    def _prune(self, now: float) -> None:
        oldest_valid = now - self._window
        while self._order and self._order[0][0] < oldest_valid:
            _, nonce = self._order.popleft()
            self._seen.discard(nonce)

    def check_and_add(self, nonce: str, timestamp: int, now: float) -> bool:
        """True the first time a nonce is seen in the window (and remembers it); False for a replay."""
        self._prune(now)
        if timestamp <= self._floor or nonce in self._seen:
            return False
        while len(self._seen) >= self._max:
            ts, old = self._order.popleft()
            self._seen.discard(old)
            self._floor = max(self._floor, ts)
            if timestamp <= self._floor:
                return False
        # insert keeping rough time order (requests arrive within the skew window; order only
        # matters for pruning, and an entry pruned a little late is merely kept longer)
        self._order.append((timestamp, nonce))
        self._seen.add(nonce)
        return True
