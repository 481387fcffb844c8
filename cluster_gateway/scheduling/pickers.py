"""Pickers turn weighted scores into a ranked list: the choice first, then fallbacks for the proxy
(connect failures) and the ext_proc answer (Envoy's fallback endpoint list)."""

from __future__ import annotations

import heapq
from collections.abc import Mapping
from operator import itemgetter
from typing import Any

from cluster_gateway.pool import PodState
from cluster_gateway.scheduling.plugin import PluginBase, SchedulingHandle
from cluster_gateway.scheduling.types import SchedulingContext

MAX_RANKED = 10  # the choice + fallbacks (proxy.maxAttempts <= 10, extProc.fallbackEndpoints <= 8)
TIE_EPS = 1e-9
_score_of = itemgetter(1)


def _rest_by_score(scored: list[tuple[PodState, float]], exclude: set[int], k: int) -> list[PodState]:
    if k <= 0:
        return []
    top = heapq.nlargest(k + len(exclude), scored, key=_score_of)
    return [p for p, _ in top if id(p) not in exclude][:k]


class MaxScorePicker(PluginBase):
    """Highest total wins; ties (e.g. an idle pool) are broken at random so load spreads."""

    def __init__(self, name: str, params: Mapping[str, Any], handle: SchedulingHandle) -> None:
        super().__init__(name, params, handle)
        self._rng = handle.rng

    def pick(self, ctx: SchedulingContext, scored: list[tuple[PodState, float]]) -> list[PodState]:
        if len(scored) == 1:
            return [scored[0][0]]
        best = max(scored, key=_score_of)[1]
        floor = best - TIE_EPS
        ties = [p for p, s in scored if s >= floor]
        if len(ties) >= MAX_RANKED:
            return self._rng.sample(ties, MAX_RANKED)
        self._rng.shuffle(ties)
        return ties + _rest_by_score(scored, {id(p) for p in ties}, MAX_RANKED - len(ties))


class PowerOfTwoPicker(PluginBase):
    """Best of two random candidates: near-best choices without herding on one pod when scores lag."""

    def __init__(self, name: str, params: Mapping[str, Any], handle: SchedulingHandle) -> None:
        super().__init__(name, params, handle)
        self._rng = handle.rng

    def pick(self, ctx: SchedulingContext, scored: list[tuple[PodState, float]]) -> list[PodState]:
        if len(scored) == 1:
            return [scored[0][0]]
        a, b = self._rng.sample(scored, 2)
        first, second = (a, b) if a[1] >= b[1] else (b, a)
        head = [first[0], second[0]]
        return head + _rest_by_score(scored, {id(p) for p in head}, MAX_RANKED - 2)


class WeightedRandomPicker(PluginBase):
    """Random in proportion to score squared: mostly good pods, never a single hot one."""

    def __init__(self, name: str, params: Mapping[str, Any], handle: SchedulingHandle) -> None:
        super().__init__(name, params, handle)
        self._rng = handle.rng

    def pick(self, ctx: SchedulingContext, scored: list[tuple[PodState, float]]) -> list[PodState]:
        if len(scored) == 1:
            return [scored[0][0]]
        weights = [s * s + 1e-6 for _, s in scored]
        choice = self._rng.choices(scored, weights=weights, k=1)[0][0]
        return [choice, *_rest_by_score(scored, {id(choice)}, MAX_RANKED - 1)]


class RoundRobinPicker(PluginBase):
    """Ignores scores: the next candidate in pool order (the baseline every balancer starts from)."""

    whole_pool = True  # a rotation over a random sample is no rotation: never a two-stage pick

    def __init__(self, name: str, params: Mapping[str, Any], handle: SchedulingHandle) -> None:
        super().__init__(name, params, handle)
        self._next = 0

    def pick(self, ctx: SchedulingContext, scored: list[tuple[PodState, float]]) -> list[PodState]:
        n = len(scored)
        start = self._next % n
        self._next = start + 1
        return [scored[(start + i) % n][0] for i in range(min(n, MAX_RANKED))]
