"""When to scrape which pod: adaptive per-pod intervals within one CPU budget, shed fairly.

Per-pod loops that each sleep their interval stretch *every* pod's interval once the event loop runs
out of CPU (at ~400 pods at 100 ms with full bodies, each pod then went stale in turn). Instead one
earliest-deadline-first queue holds every pod's next due time, and a scrape starts only while the
CPU budget (`cpuBudgetCores` of the gateway's core, measured per scrape) has room. Over budget, the
most overdue pods go first, so the pods share the lateness round-robin instead of a few starving.

Adaptive intervals: a pod that was *quiet* for `idleAfterScrapes` scrapes in a row (no request
dispatched to it since the previous scrape, and its sample unchanged) is scraped every
`idleIntervalMs` instead of every `intervalMs`. Its queue entry still comes due every `intervalMs`
and costs only a check: the moment the gateway has dispatched a request to it (its
`dispatched_since_scrape`, which the worker feed sums over processes), it is scraped at once and is
back at the fast interval. That keeps the frozen-metrics detector coherent: a quiet pod is by
definition one without dispatches, which the detector never counts (frozen.py), and a pod that takes
requests is always at the fast interval, where an unchanged body under traffic is counted.

Pure bookkeeping with an injected clock; the scraper drives it (`due`, `started`, `finished`).
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Callable
from dataclasses import dataclass

__all__ = ["Cadence"]

_FIRST_COST_S = 300e-6  # CPU per scrape assumed until one is measured (a full 50 KB vLLM body)
_EWMA = 0.2  # weight of a new CPU measurement in the per-scrape estimate (one scrape in 8 is measured)


@dataclass(slots=True)
class _Pod:
    name: str
    due: float  # the next check (a scrape when not quiet, else a dispatch check)
    generation: int = 0  # heap entries of older generations are dropped when popped
    last_start: float = -math.inf  # start of the last scrape
    quiet: int = 0  # consecutive quiet scrapes (no dispatches, unchanged sample)
    running: bool = False
    phase: float | None = None  # the gap after the first scrape; None once used


class Cadence:
    """EDF queue of pods; `budget_cores` 0 means no CPU limit, `idle_after` 0 no adaptive interval."""

    def __init__(
        self,
        interval_s: float,
        *,
        idle_interval_s: float,
        idle_after: int,
        budget_cores: float,
        dispatched: Callable[[str], int],
    ) -> None:
        self.interval_s = interval_s
        self.idle_interval_s = max(idle_interval_s, interval_s)
        self.idle_after = idle_after
        self.budget_cores = budget_cores
        self._dispatched = dispatched
        self._pods: dict[str, _Pod] = {}
        self._heap: list[tuple[float, int, str]] = []
        self.cost_s = _FIRST_COST_S  # EWMA of CPU seconds per scrape
        self._tokens = 0.0  # CPU seconds the budget still allows now (may go negative: a debt)
        self._refilled_at: float | None = None
        self.throttled = 0  # wake-ups that found pods due and the budget spent (cumulative)

    # --- membership ----------------------------------------------------------------------------
    def add(self, name: str, now: float, phase: float | None = None) -> None:
        """A new pod: due at once, its second scrape `phase` later (a random phase in [0, interval)
        spreads pods discovered together over the interval instead of scraping them in one burst)."""
        if name not in self._pods:
            pod = self._pods[name] = _Pod(name, now, phase=phase)
            self._push(pod)

    def remove(self, name: str) -> None:
        self._pods.pop(name, None)  # its heap entries are dropped when popped

    def __contains__(self, name: str) -> bool:
        return name in self._pods

    def names(self) -> list[str]:
        return list(self._pods)

    def is_quiet(self, name: str) -> bool:
        pod = self._pods.get(name)
        return pod is not None and self.idle_after > 0 and pod.quiet >= self.idle_after

    # --- the loop's side -----------------------------------------------------------------------
    def due(self, now: float, *, skip: Callable[[str], bool] | None = None) -> list[str]:
        """Pods to scrape now, most overdue first, as many as the budget allows.

        `skip(name)`: a due pod someone else keeps fresh (another replica's shard) is checked again
        one interval later instead of scraped."""
        self._refill(now)
        out: list[str] = []
        heap = self._heap
        while heap and heap[0][0] <= now:
            _, generation, name = heap[0]
            pod = self._pods.get(name)
            if pod is None or pod.generation != generation or pod.running:
                heapq.heappop(heap)  # removed, superseded, or in flight (re-queued when it finishes)
                continue
            if self._resting(pod, now):
                heapq.heappop(heap)
                pod.due = min(now + self.interval_s, pod.last_start + self.idle_interval_s)
                self._push(pod)
                continue
            if skip is not None and skip(name):
                heapq.heappop(heap)
                pod.due = now + self.interval_s
                self._push(pod)
                continue
            if self.budget_cores > 0 and self._tokens <= 0:
                self.throttled += 1
                break
            heapq.heappop(heap)
            pod.running = True
            pod.last_start = now
            self._tokens -= self.cost_s
            out.append(name)
        return out

    def finished(self, name: str, now: float, *, cpu_s: float | None, quiet: bool) -> None:
        """A scrape of `name` that started at its `last_start` is over (good or failed)."""
        if cpu_s is not None:
            self._tokens += self.cost_s - cpu_s  # settle the estimate charged at the start
            self.cost_s += _EWMA * (cpu_s - self.cost_s)
        pod = self._pods.get(name)
        if pod is None:
            return
        pod.running = False
        pod.quiet = pod.quiet + 1 if quiet else 0
        # the next scrape one interval after this one started (from now if it outlasted that)
        gap = self.interval_s if pod.phase is None else pod.phase
        pod.phase = None
        pod.due = max(pod.last_start + gap, now)
        self._push(pod)

    def next_wakeup(self, now: float) -> float:
        """When `due` may next return a pod (the head of the queue, or when the budget refills)."""
        if not self._heap:
            return now + self.interval_s
        head = self._heap[0][0]
        if self.budget_cores > 0 and self._tokens <= 0:
            return max(head, now + (-self._tokens + self.cost_s) / self.budget_cores)
        return head

    # --- internals -----------------------------------------------------------------------------
    def _resting(self, pod: _Pod, now: float) -> bool:
        """A quiet pod within its idle interval with nothing dispatched to it: only a check."""
        return (
            self.idle_after > 0
            and pod.quiet >= self.idle_after
            and now < pod.last_start + self.idle_interval_s  # the same sum the re-check is due at
            and self._dispatched(pod.name) == 0
        )

    def _refill(self, now: float) -> None:
        if self._refilled_at is None:
            self._refilled_at = now
            self._tokens = self.budget_cores * self.interval_s
            return
        cap = self.budget_cores * self.interval_s  # at most one interval's worth saved up
        self._tokens = min(cap, self._tokens + (now - self._refilled_at) * self.budget_cores)
        self._refilled_at = now

    def _push(self, pod: _Pod) -> None:
        pod.generation += 1
        heapq.heappush(self._heap, (pod.due, pod.generation, pod.name))
