"""Pickers return a ranked list (choice, then fallbacks) and break ties at random."""

from __future__ import annotations

from collections import Counter

import pytest

from cluster_gateway.pool import EndpointPool
from cluster_gateway.scheduling import registry
from cluster_gateway.scheduling.pickers import MAX_RANKED
from common.plugins import has_hook

from .podfactory import add_pod, plugin, req, scheduler

PICKERS = sorted(t for t in registry.BUILTIN if has_hook(plugin(t), "pick"))


def _scored(n: int) -> list[tuple[object, float]]:
    pool = EndpointPool()
    pods = [add_pod(pool, f"p{i}") for i in range(n)]
    return [(p, i / n) for i, p in enumerate(pods)]


def test_the_builtin_pickers_are_found_by_their_hook() -> None:
    assert PICKERS == ["max_score", "power_of_two", "round_robin", "weighted_random"]


@pytest.mark.parametrize("name", PICKERS)
def test_every_picker_ranks_distinct_pods_with_fallbacks(name: str) -> None:
    picker = plugin(name, seed=1)
    scored = _scored(30)
    ranked = picker.pick(None, scored)  # type: ignore[arg-type]
    assert len(ranked) == MAX_RANKED
    assert len({id(p) for p in ranked}) == MAX_RANKED


def test_max_score_ranks_by_score() -> None:
    picker = plugin("max_score", seed=1)
    ranked = picker.pick(None, _scored(12))  # type: ignore[arg-type]
    assert [p.name for p in ranked] == [f"p{i}" for i in range(11, 1, -1)]


def test_ties_are_broken_at_random() -> None:
    pool = EndpointPool()
    for i in range(5):
        add_pod(pool, f"p{i}")
    s = scheduler(pool, seed=3)
    firsts = Counter(s.schedule(req()).pod.name for _ in range(200))  # nothing dispatched: all tie
    assert len(firsts) == 5
    assert min(firsts.values()) > 20


def test_power_of_two_prefers_the_better_of_its_sample() -> None:
    picker = plugin("power_of_two", seed=5)
    scored = _scored(10)
    firsts = Counter(picker.pick(None, scored)[0].name for _ in range(500))  # type: ignore[arg-type]
    assert firsts["p9"] > firsts["p0"]
    assert firsts["p0"] == 0  # the worst pod can never win a pair
