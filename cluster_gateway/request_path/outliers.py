"""Outlier detection: eject pods on what requests see, not on what their metrics say.

A pod with a broken CUDA context answers 503 in a millisecond: its queue is empty and its KV cache
idle, so every load-aware scorer ranks it best and it attracts the traffic. Scrapes cannot see this;
only request outcomes can. Three rules, Envoy's (see `OutlierDetection` for the defaults):
consecutive 5xx answers, consecutive gateway failures (refused/reset connections, first-byte
timeouts), and a failure percentage over an interval. An ejected pod is marked in the pool
(`PodState.ejected_until`), so the scheduler's health filter skips it (failing open if every pod
is out), `/ready`, the metrics and the capacity report count it as not ready. Never more than
`maxEjectionPercent` of the pool is out at once (at least one pod may always be).

Between ejections, `rank()` moves pods with recent failures behind the others (a decaying penalty),
so a pod that fails fast is never the first choice while the counters build up, and a recovered
pod wins its place back as the penalty decays. A demoted pod still gets its normal place for one
request every `PROBE_EVERY_S` while its failures count towards an ejection: without that, the penalty itself would shield a broken pod from
the failures that eject it (with 2 of 3 pods broken, the second one was never ejected and the
capacity report kept counting it ready). A success clears the penalty. A 429 (`shed`) demotes
the same way but never ejects, and is probed only every `SHED_PROBE_EVERY_S` (about one retry a
second per shedding pod, well within the retry budget; its first success brings it back): an
overloaded pod is not a broken one.
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Callable
from dataclasses import dataclass

from cluster_gateway.pool import EndpointPool, PodState
from common.config.gateway import OutlierDetection

log = logging.getLogger("fleetgate.gateway.outliers")

PENALTY_HALF_LIFE_S = 5.0
PROBE_EVERY_S = 0.05  # a demoted pod on its way to ejection keeps its place for one request this often
SHED_PROBE_EVERY_S = 1.0  # ... and one demoted by 429s (not to be ejected), this often
MAX_PENALTY = 8.0  # so a long failure streak still decays away within ~20 s


@dataclass(slots=True)
class _PodRecord:
    consecutive_5xx: int = 0
    consecutive_gateway: int = 0
    window_start: float = 0.0
    window_requests: int = 0
    window_failures: int = 0
    ejections: int = 0  # in a row; sets the next ejection's length
    penalty: float = 0.0  # decaying count of recent failures
    penalty_at: float = 0.0
    probe_at: float = 0.0  # when a demoted pod last kept its place in `rank`


class OutlierDetector:
    """Per-pod failure bookkeeping and ejection; all calls are O(1) except `rank` (O(ranked))."""

    def __init__(
        self,
        pool: EndpointPool,
        cfg: OutlierDetection,
        clock: Callable[[], float] = time.monotonic,
        on_eject: Callable[[str, str, float], None] | None = None,
    ) -> None:
        self.pool = pool
        self.cfg = cfg
        self._clock = clock
        self._pods: dict[str, _PodRecord] = {}
        self.on_eject = on_eject  # (pod, reason, seconds): metrics hook

    def _rec(self, name: str, now: float) -> _PodRecord:
        r = self._pods.get(name)
        if r is None:
            r = self._pods[name] = _PodRecord(window_start=now, penalty_at=now)
        elif now - r.window_start >= self.cfg.interval_s:
            r.window_start, r.window_requests, r.window_failures = now, 0, 0
        return r

    def _decayed(self, r: _PodRecord, now: float) -> float:
        if r.penalty <= 0.0:
            return 0.0
        return r.penalty * math.exp2(-(now - r.penalty_at) / PENALTY_HALF_LIFE_S)

    # --- outcomes --------------------------------------------------------------
    def success(self, pod: PodState) -> None:
        now = self._clock()
        r = self._rec(pod.name, now)
        r.consecutive_5xx = r.consecutive_gateway = 0
        r.penalty = 0.0
        r.window_requests += 1
        if r.ejections and pod.ejected_until <= now:
            r.ejections = 0  # the probe after an ejection succeeded

    def shed(self, pod: PodState) -> None:
        """The pod answered 429: rank it behind the others for a while, but never eject it."""
        if not self.cfg.enabled:
            return
        now = self._clock()
        r = self._rec(pod.name, now)
        r.penalty = min(MAX_PENALTY, self._decayed(r, now) + 1.0)
        r.penalty_at = now

    def failure(self, pod: PodState, *, gateway: bool) -> None:
        """A 5xx answer (`gateway=False`) or a connection/timeout failure (`gateway=True`)."""
        if not self.cfg.enabled:
            return
        now = self._clock()
        r = self._rec(pod.name, now)
        r.penalty = min(MAX_PENALTY, self._decayed(r, now) + 1.0)
        r.penalty_at = now
        r.window_requests += 1
        r.window_failures += 1
        if gateway:
            r.consecutive_gateway += 1
        else:
            r.consecutive_5xx += 1
        if pod.ejected_until > now:
            return
        reason = None
        if r.consecutive_5xx >= self.cfg.consecutive_5xx:
            reason = "consecutive_5xx"
        elif r.consecutive_gateway >= self.cfg.consecutive_gateway_failures:
            reason = "consecutive_gateway_failures"
        elif (
            r.window_requests >= self.cfg.failure_percentage_min_requests
            and r.window_failures * 100 >= self.cfg.failure_percentage_threshold * r.window_requests
        ):
            reason = "failure_percentage"
        if reason is not None:
            self._eject(pod, r, reason, now)

    def _eject(self, pod: PodState, r: _PodRecord, reason: str, now: float) -> None:
        pods = self.pool.pods()
        out = sum(1 for p in pods if p.ejected_until > now)
        allowed = max(1, math.ceil(len(pods) * self.cfg.max_ejection_percent / 100.0))
        if self.cfg.max_ejection_percent == 0 or out >= allowed:
            return
        r.ejections += 1
        seconds = min(self.cfg.max_ejection_time_s, self.cfg.base_ejection_time_s * r.ejections)
        pod.ejected_until = now + seconds
        r.consecutive_5xx = r.consecutive_gateway = 0
        r.penalty = 0.0  # when the ejection ends the pod gets its place back (its probe)
        r.window_start, r.window_requests, r.window_failures = now, 0, 0
        log.warning("pod %s ejected for %.0f s (%s)", pod.name, seconds, reason)
        if self.on_eject is not None:
            self.on_eject(pod.name, reason, seconds)

    # --- ranking ---------------------------------------------------------------
    def rank(self, pods: list[PodState]) -> list[PodState]:
        """The scheduler's ranking with ejected pods last and recently failing pods behind healthy
        ones (stable otherwise): a fast-failing pod never stays the first choice."""
        if not self._pods:
            return pods
        now = self._clock()
        keys = []
        reorder = False
        for p in pods:
            r = self._pods.get(p.name)
            if r is None:
                keys.append(0)
                continue
            k = 2 if p.ejected_until > now else (1 if self._decayed(r, now) >= 0.5 else 0)
            every = PROBE_EVERY_S if r.consecutive_5xx or r.consecutive_gateway else SHED_PROBE_EVERY_S
            if k == 1 and now - max(r.penalty_at, r.probe_at) >= every:
                r.probe_at = now  # its probe: this request may try it where the scheduler put it
                k = 0
            reorder = reorder or k > 0
            keys.append(k)
        if not reorder:
            return pods
        order = sorted(range(len(pods)), key=keys.__getitem__)
        return [pods[i] for i in order]

    def forget_departed(self) -> None:
        live = {p.name for p in self.pool.pods()}
        for name in [n for n in self._pods if n not in live]:
            del self._pods[name]

    def ejected(self) -> list[str]:
        now = self._clock()
        return [p.name for p in self.pool.pods() if p.ejected_until > now]
