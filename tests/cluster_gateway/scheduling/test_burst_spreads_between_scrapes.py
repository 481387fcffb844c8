"""Between two scrapes the metrics do not move; the gateway's own counts must spread a burst."""

from __future__ import annotations

from collections import Counter

from cluster_gateway.pool import EndpointPool
from common.config.gateway import Scheduling

from .podfactory import add_pod, dispatch, req, scheduler


def test_burst_spreads_evenly_across_idle_pods() -> None:
    pool = EndpointPool()
    for i in range(4):
        add_pod(pool, f"p{i}")
    s = scheduler(pool)
    picks = Counter(dispatch(pool, s, req(f"question {n}")) for n in range(40))
    assert sorted(picks.values()) == [10, 10, 10, 10]


def test_burst_does_not_pile_onto_the_pod_that_looked_idle() -> None:
    pool = EndpointPool()
    add_pod(pool, "looked-idle", waiting=0, running=2)
    add_pod(pool, "a", waiting=2, running=20)
    add_pod(pool, "b", waiting=2, running=20)
    s = scheduler(pool)
    picks = Counter(dispatch(pool, s, req(f"q{n}")) for n in range(30))
    # The idle pod rightly takes more, but not everything: once its estimated queue passes
    # the others', they share the burst.
    assert picks["looked-idle"] > picks["a"]
    assert picks["a"] >= 5 and picks["b"] >= 5


def test_reference_profile_piles_a_burst_onto_one_pod() -> None:
    """The baseline we beat: scraped queues only, so every pick between scrapes looks the same."""
    pool = EndpointPool()
    add_pod(pool, "looked-idle", waiting=0, running=2)
    add_pod(pool, "a", waiting=2, running=20)
    add_pod(pool, "b", waiting=2, running=20)
    s = scheduler(pool, Scheduling(default_profile="reference"))
    picks = Counter(dispatch(pool, s, req(f"q{n}")) for n in range(30))
    assert picks == {"looked-idle": 30}


def test_inflight_releases_make_a_pod_attractive_again() -> None:
    pool = EndpointPool()
    add_pod(pool, "a")
    add_pod(pool, "b")
    s = scheduler(pool)
    first = dispatch(pool, s, req("x"))
    other = "b" if first == "a" else "a"
    assert dispatch(pool, s, req("y")) == other
    for name in (first, other):
        pool.release(name)
        pod = pool.get(name)
        assert pod is not None and pod.metrics is not None
        pool.record_scrape(name, pod.metrics)  # the next scrape resets the dispatched count
    picks = Counter(dispatch(pool, s, req(f"z{n}")) for n in range(10))
    assert picks == {"a": 5, "b": 5}
