"""GCRA (generic cell rate algorithm): the rate-limit arithmetic shared by Redis (Lua) and in-process.

Why GCRA rather than windows: one number of state per limit (the theoretical arrival time, TAT),
no boundary bursts (a fixed window lets 2x the limit through around its edge), weighted costs for
token limits, and a refund is just moving the TAT back — which is exactly what reconciling a token
reservation with real usage needs. A limit of L per period P admits a burst of L from idle and then
L per P, evenly; executed atomically in one place it never admits more, whatever the replica count.
`admit_lua` in `lua/admit.lua` performs the same steps as `Gcra.admit`.
"""

from __future__ import annotations

from dataclasses import dataclass

PERIOD_MS = 60_000.0  # limits are per minute


@dataclass(slots=True)
class GcraResult:
    allowed: bool
    remaining: int  # units still admissible right now (after this request, if allowed)
    reset_ms: float  # until the limit is back to its full burst
    retry_after_ms: float  # when denied: until this request would fit (inf: it never can)


class Gcra:
    """One limit's state, in process (the Redis path keeps the same TAT in a key)."""

    __slots__ = ("limit", "period_ms", "tat")

    def __init__(self, limit: int, period_ms: float = PERIOD_MS) -> None:
        self.limit = limit
        self.period_ms = period_ms
        self.tat = 0.0

    @property
    def interval_ms(self) -> float:
        return self.period_ms / self.limit

    def peek(self, cost: int, now_ms: float) -> GcraResult:
        iv = self.interval_ms
        tat = max(self.tat, now_ms)
        new_tat = tat + cost * iv
        if cost > self.limit:
            return GcraResult(False, _remaining(tat, now_ms, iv, self.period_ms), tat - now_ms, float("inf"))
        if new_tat - now_ms > self.period_ms:
            return GcraResult(
                False,
                _remaining(tat, now_ms, iv, self.period_ms),
                tat - now_ms,
                new_tat - now_ms - self.period_ms,
            )
        return GcraResult(True, _remaining(new_tat, now_ms, iv, self.period_ms), new_tat - now_ms, 0.0)

    def commit(self, cost: int, now_ms: float) -> None:
        self.tat = max(self.tat, now_ms) + cost * self.interval_ms

    def adjust(self, delta: int, now_ms: float) -> None:
        """Reconcile: charge extra (`delta` > 0) or refund (< 0) units already reserved."""
        if delta > 0:
            self.tat = max(self.tat, now_ms) + delta * self.interval_ms
        elif delta < 0 and self.tat > now_ms:
            self.tat = max(now_ms, self.tat + delta * self.interval_ms)


def _remaining(tat: float, now_ms: float, iv: float, period_ms: float) -> int:
    return max(0, int((period_ms - (tat - now_ms)) / iv + 1e-9))


def format_duration(ms: float) -> str:
    """Durations the way OpenAI's `x-ratelimit-reset-*` headers spell them: `20ms`, `1.5s`, `6m0s`."""
    if ms <= 0:
        return "0s"
    if ms < 1000:
        return f"{max(1, round(ms))}ms"
    total_s = ms / 1000.0
    if total_s < 60:
        return f"{_trim(total_s)}s"
    hours, rem = divmod(total_s, 3600)
    minutes, secs = divmod(rem, 60)
    if hours >= 1:
        return f"{int(hours)}h{int(minutes)}m{_trim(secs)}s"
    return f"{int(minutes)}m{_trim(secs)}s"


def _trim(s: float) -> str:
    text = f"{s:.3f}".rstrip("0").rstrip(".")
    return text or "0"
