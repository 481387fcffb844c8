"""The `prefill` scorer counts prompt tokens a pod still has to compute: a pod that caches the prompt's
prefix beats an idle pod that does not, and a pod just sent uncached prompts pays for them until that
work has had time to finish."""

from __future__ import annotations

import dataclasses

import pytest

from cluster_gateway.pool import EndpointPool
from cluster_gateway.scheduling.pod_speed import SPEED_ANNOTATION, relative_speeds
from cluster_gateway.scheduling.prefill_backlog import PrefillBacklogScorer
from common.config.gateway import Profile, Scheduling

from .podfactory import Clock, add_pod, dispatch, req, scheduler

PREFIX = "You are the ACME support desk; the manual follows. " * 400  # ~20k chars, ~5k tokens


def _cfg() -> Scheduling:
    return Scheduling(default_profile="pf", profiles={"pf": Profile(weights={"prefill": 1.0})})


def _rescrape(pool: EndpointPool, now: float) -> None:
    """A fresh scrape of the same numbers: time passed, metrics did not go stale."""
    for p in pool.pods():
        assert p.metrics is not None
        pool.record_scrape(p.name, dataclasses.replace(p.metrics, scraped_at=now))


def test_the_pod_caching_the_prefix_beats_an_idle_cold_pod() -> None:
    pool = EndpointPool()
    add_pod(pool, "warm", running=12, inflight=12)
    add_pod(pool, "cold")
    clock = Clock()
    s = scheduler(pool, _cfg(), clock=clock)
    s.on_dispatch(req(PREFIX + "first question"), pool.pods()[0])  # the index now places the prefix on warm
    clock.t += 60.0  # long ago: its prefill is done
    _rescrape(pool, clock.t)
    res = s.schedule(req(PREFIX + "another question"))
    assert res.pod.name == "warm"
    assert res.scores["prefill"] == pytest.approx(1.0)


def test_uncached_prompts_just_sent_to_a_pod_count_against_it_and_then_decay() -> None:
    pool = EndpointPool()
    add_pod(pool, "a")
    add_pod(pool, "b")
    clock = Clock()
    s = scheduler(pool, _cfg(), clock=clock)
    first = dispatch(pool, s, req("question one " * 500))  # ~1.6k uncached tokens, no prefix shared
    second = dispatch(pool, s, req("a different question " * 500))
    assert {first, second} == {"a", "b"}  # the second avoids the pod busy with the first's prefill
    backlog = s.plugin("prefill")
    assert isinstance(backlog, PrefillBacklogScorer)
    assert backlog.backlog(first, clock.t) > 1000
    clock.t += 20.0  # ten decay constants later
    assert backlog.backlog(first, clock.t) < 1.0


@pytest.mark.parametrize(
    ("prefix_tokens", "winner"),
    [(1200, "idle-cold"), (6000, "busy-warm")],
)
def test_affinity_grows_with_the_prefill_it_saves(prefix_tokens: int, winner: str) -> None:
    """With in-flight counts at equal weight, a cached 1,200-token system prompt (0.29 of the
    4096-token minimum span) does not outweigh 4 more requests in flight (0.5), so a burst still
    spreads; a cached 6k-token prefix (seconds of prefill on a small GPU, a full point) does. At a
    2048-token span the short prompt would score 0.59 and pin the burst."""
    pool = EndpointPool()
    add_pod(pool, "busy-warm", running=4, inflight=4)  # in-flight score 0.5 (span 8)
    add_pod(pool, "idle-cold")
    clock = Clock()
    cfg = Scheduling(
        default_profile="pf", profiles={"pf": Profile(weights={"prefill": 1.0, "inflight": 1.0})}
    )
    s = scheduler(pool, cfg, clock=clock)
    prefix = ("shared system prompt words " * prefix_tokens)[: prefix_tokens * 4]  # 4 chars a token
    s.on_dispatch(req(prefix + "first question"), pool.pods()[0])
    clock.t += 60.0  # its prefill is long done: only the cache differs
    _rescrape(pool, clock.t)
    assert s.schedule(req(prefix + "another question")).pod.name == winner


def _speed(tok_s: float) -> dict[str, str]:
    return {SPEED_ANNOTATION: str(tok_s)}


def test_relative_speeds_weigh_only_a_mixed_pool() -> None:
    pool = EndpointPool()
    add_pod(pool, "h100", annotations=_speed(27_000))
    add_pod(pool, "l4", annotations=_speed(3_000))
    add_pod(pool, "unsaid")
    add_pod(pool, "bad", annotations={SPEED_ANNOTATION: "fast"})
    assert relative_speeds(pool.pods()) == {"h100": 9.0, "l4": 1.0, "unsaid": 1.0, "bad": 1.0}
    same = EndpointPool()
    add_pod(same, "a", annotations=_speed(3_000))
    add_pod(same, "b", annotations=_speed(3_000))
    add_pod(same, "c")
    assert relative_speeds(same.pods()) == {}  # nothing differs: the scores stay as they were


def test_a_fast_pod_takes_a_cold_prompt_despite_a_backlog_a_slow_one_would_not() -> None:
    """An H100 computes prefill ~9x faster than an L4: the same uncached tokens cost it a ninth, and
    what was sent there drains nine times sooner. Counting tokens alone, the idle L4 would win."""
    prompt = PREFIX + "a question"

    def pick(annotate: bool) -> str:
        pool = EndpointPool()
        add_pod(pool, "h100", annotations=_speed(27_000) if annotate else None)
        add_pod(pool, "l4", annotations=_speed(3_000) if annotate else None)
        clock = Clock()
        s = scheduler(pool, _cfg(), clock=clock)
        s.on_dispatch(req("other document " * 1500), pool.pods()[0])  # ~3-4k cold tokens on h100
        clock.t += 0.5
        _rescrape(pool, clock.t)
        return s.schedule(req(prompt)).pod.name

    assert pick(annotate=False) == "l4"
    assert pick(annotate=True) == "h100"


def test_a_uniformly_annotated_pool_scores_exactly_as_an_unannotated_one() -> None:
    def scores(annotations: dict[str, str] | None) -> tuple[list[str], dict[str, float]]:
        pool = EndpointPool()
        for n in ("a", "b", "c"):
            add_pod(pool, n, annotations=annotations)
        clock = Clock()
        s = scheduler(pool, _cfg(), clock=clock)
        s.on_dispatch(req(PREFIX + "q1"), pool.pods()[0])
        clock.t += 0.7
        _rescrape(pool, clock.t)
        res = s.schedule(req(PREFIX + "q2"))
        return [p.name for p in res.pods], res.scores

    assert scores(_speed(3_000)) == scores(None)
