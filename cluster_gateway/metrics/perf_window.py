"""A pod's service speed over the last half minute, from its cumulative latency histograms.

The capacity agent needs how fast each pod serves (prefill, time a request holds a running slot,
time per output token) to tell an H100 pod from an L4 pod in the same queue state. Engines export
these as histograms since start; the difference of two readings' (sum, count) gives the mean over
the window between them, and the lifetime mean stands in while the window holds no request.
The engine's cap on running sequences (vLLM `max_num_seqs`, exported by no engine) is learned from
the gauges: a running count that holds still for `cap_hold_s` while requests wait at every scrape,
KV has room and requests finish (freed slots went to waiting requests, and no more were let in).
Without the finishes a long prefill step would pass for a cap, and without the hold the brief
wait of each new arrival for the next engine step would. A plateau under prefill-bound load still
can: a "cap" the engine later runs past is raised to what it ran. Nothing measured is dropped when
traffic stops: the figures carry their age (`speed_age_s`, since a request last finished;
`cap_age_s`, since the cap was last seen holding) and the service model ages them slowly toward
the configured fallback (`cluster_gateway.agent.service_model`), so an idle pod's capacity does
not jump back to defaults a minute after its last request.
The mean gap between admissions (window / requests that left the engine queue in it, from the
queue-time histogram's count) bounds how long each queued request holds up the next: see
`cluster_gateway.agent.service_model`.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field

from cluster_gateway.metrics.engines import PerfCounters
from cluster_gateway.pool import PodMetrics, PodPerf

__all__ = ["PerfWindow", "derive_perf", "window_means"]

KV_ROOM = 0.9  # below this KV usage a queue is not KV-bound (vLLM admits until blocks run out)


def window_means(old: PerfCounters, new: PerfCounters) -> dict[str, float]:
    """Mean per figure over the window old → new; the lifetime mean where no request fell in it."""
    out: dict[str, float] = {}
    for figure, (total, count) in new.items():
        prev_total, prev_count = old.get(figure, (0.0, 0.0))
        if count > prev_count:
            out[figure] = (total - prev_total) / (count - prev_count)
        elif count > 0:
            out[figure] = total / count
    return out


def _difference(means: dict[str, float], a: str, b: str) -> float | None:
    if a in means and b in means:
        return max(0.0, means[a] - means[b])
    return None


def derive_perf(
    means: dict[str, float], running_cap: int | None, *, speed_age_s: float = 0.0, cap_age_s: float = 0.0
) -> PodPerf:
    """PodPerf from per-figure means: prefill = prefill phase, else TTFT - queue time; a running
    slot is held for the inference phase, else end-to-end - queue time."""
    prefill = means.get("prefill", _difference(means, "ttft", "queue"))
    service = means.get("inference", _difference(means, "e2e", "queue"))
    footprint = None
    if "prompt_tokens" in means and "output_tokens" in means:
        footprint = means["prompt_tokens"] + means["output_tokens"]
    return PodPerf(
        prefill_s=prefill if prefill else None,
        service_s=service if service else None,
        itl_s=means.get("itl") or None,
        footprint_tokens=footprint if footprint else None,
        running_cap=running_cap,
        admit_gap_s=means.get("admit_gap") or None,
        speed_age_s=speed_age_s,
        cap_age_s=cap_age_s,
    )


def finished(counters: PerfCounters) -> float:
    """Requests finished since the pod started (end-to-end or running-phase observations)."""
    return max((counters[f][1] for f in ("e2e", "inference") if f in counters), default=0.0)


@dataclass(slots=True)
class _PodHistory:
    readings: deque[tuple[float, PerfCounters]] = field(default_factory=deque)
    means: dict[str, float] = field(default_factory=dict)  # as of the last counters read
    done: float = 0.0  # requests finished, as of the last counters read
    running_cap: int | None = None
    cap_seen_at: float = 0.0
    plateau: tuple[int, float, float] | None = None  # (running, finished, since) while cap-bound-looking
    last_finish_at: float | None = None  # when the finished count last grew (None: never seen)


class PerfWindow:
    """Per pod: readings of its counters over `window_s`, and its learned running cap."""

    def __init__(self, window_s: float = 30.0, cap_hold_s: float = 1.0) -> None:
        self.window_s = window_s
        self.cap_hold_s = cap_hold_s
        self._pods: dict[str, _PodHistory] = {}

    def update(self, pod: str, now: float, counters: PerfCounters | None, metrics: PodMetrics) -> PodPerf:
        """Fold in one scrape: its gauges always, its counters when they were read (not None)."""
        h = self._pods.setdefault(pod, _PodHistory())
        if counters is not None:
            self._add_reading(h, now, counters)
        self._learn_cap(h, now, metrics, h.done)
        return derive_perf(
            h.means,
            h.running_cap,
            speed_age_s=now - h.last_finish_at if h.last_finish_at is not None else 0.0,
            cap_age_s=now - h.cap_seen_at if h.running_cap is not None else 0.0,
        )

    def _add_reading(self, h: _PodHistory, now: float, counters: PerfCounters) -> None:
        readings = h.readings
        if readings and any(c < readings[-1][1].get(f, (0.0, 0.0))[1] for f, (_, c) in counters.items()):
            readings.clear()  # a count went back: the server restarted (maybe reconfigured)
            h.running_cap = h.plateau = h.last_finish_at = None
            h.done = 0.0
        readings.append((now, counters))
        while len(readings) > 2 and now - readings[1][0] >= self.window_s:
            readings.popleft()  # keep one reading at or beyond the window's start
        h.means = window_means(readings[0][1], counters)
        admitted = counters.get("queue", (0.0, 0.0))[1] - readings[0][1].get("queue", (0.0, 0.0))[1]
        if admitted > 0:  # requests that left the queue in the window: its drain rate, under load
            h.means["admit_gap"] = (now - readings[0][0]) / admitted
        done = finished(counters)
        if done > h.done or (h.last_finish_at is None and done > 0):
            h.last_finish_at = now
        h.done = done

    def _learn_cap(self, h: _PodHistory, now: float, m: PodMetrics, done: float) -> None:
        bound = m.waiting > 0 and m.running > 0 and (m.kv_usage is None or m.kv_usage < KV_ROOM)
        if not bound:
            h.plateau = None
        elif h.plateau is None or h.plateau[0] != m.running:
            h.plateau = (m.running, done, now)  # a new plateau: it must hold, through finishes
        elif done > h.plateau[1] and now - h.plateau[2] >= self.cap_hold_s:  # the engine's cap
            h.running_cap = max(m.running, h.running_cap or 0)
            h.cap_seen_at = now
        if h.running_cap is not None and m.running > h.running_cap:
            h.running_cap = m.running  # it ran past the "cap" (a prefill-bound plateau): at least this
            h.cap_seen_at = now

    def forget(self, pod: str) -> None:
        self._pods.pop(pod, None)
