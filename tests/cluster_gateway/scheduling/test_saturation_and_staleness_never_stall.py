"""Saturation fails open and stale metrics degrade to in-flight routing: traffic never stalls."""

from __future__ import annotations

from collections import Counter

from cluster_gateway.pool import EndpointPool
from common.config.gateway import Profile, Saturation, Scheduling

from .podfactory import add_pod, dispatch, get, req, scheduler


def test_saturated_pods_are_skipped_while_others_have_room() -> None:
    pool = EndpointPool()
    add_pod(pool, "sat-queue", waiting=5)
    add_pod(pool, "sat-kv", kv=0.85)
    add_pod(pool, "ok", waiting=4, kv=0.79)
    res = scheduler(pool).schedule(req())
    assert res.pod.name == "ok"
    assert not res.saturated
    assert {p.name for p in res.pods} == {"ok", "sat-queue", "sat-kv"}  # saturated ones as last resorts


def test_saturation_filter_fails_open_and_flags_the_result() -> None:
    pool = EndpointPool()
    add_pod(pool, "a", waiting=9, kv=0.5)
    add_pod(pool, "b", waiting=6, kv=0.6)
    add_pod(pool, "c", waiting=1, kv=0.95)
    res = scheduler(pool).schedule(req())
    assert res.saturated
    assert len(res.pods) == 3
    assert res.pod.name != "a"  # no better than b in any respect


def test_saturation_thresholds_come_from_the_profile() -> None:
    pool = EndpointPool()
    add_pod(pool, "a", waiting=6)
    add_pod(pool, "b", waiting=7)
    loose = Scheduling(profiles={"latency": Profile(saturation=Saturation(queue_depth=10, kv_usage=0.9))})
    assert not scheduler(pool, loose).schedule(req()).saturated
    assert scheduler(pool).schedule(req()).saturated
    assert not scheduler(pool).schedule(req(profile="throughput")).saturated  # tolerates queues


def test_tgi_saturation_is_judged_on_queue_only() -> None:
    pool = EndpointPool()
    add_pod(pool, "tgi", engine="tgi", kv=None, waiting=2)
    assert not scheduler(pool).schedule(req()).saturated


def test_stale_metrics_everywhere_do_not_stall_picks() -> None:
    pool = EndpointPool()
    for i in range(3):
        # Last scrapes long ago and marked stale; every pod's metrics say "saturated".
        add_pod(pool, f"p{i}", waiting=50, kv=0.99, age=30.0, stale=True)
    s = scheduler(pool)
    res = s.schedule(req())
    assert res.degraded
    assert not res.saturated  # old numbers must not make the gateway hold traffic back
    picks = Counter(dispatch(pool, s, req(f"q{n}")) for n in range(9))
    assert sorted(picks.values()) == [3, 3, 3]  # spread by in-flight counts


def test_late_metrics_without_the_stale_flag_also_degrade() -> None:
    pool = EndpointPool()
    add_pod(pool, "a", age=0.5)
    add_pod(pool, "b", age=0.7)
    res = scheduler(pool).schedule(req())
    assert res.degraded and not res.saturated


def test_a_minority_of_fresh_pods_does_not_absorb_everything() -> None:
    pool = EndpointPool()
    add_pod(pool, "fresh", age=0.01)
    for i in range(3):
        add_pod(pool, f"late{i}", age=0.5)  # the scraper is behind, the pods are fine
    s = scheduler(pool)
    picks = Counter(dispatch(pool, s, req(f"q{n}")) for n in range(8))
    assert len(picks) == 4
    assert not s.schedule(req()).degraded


def test_pods_known_dead_are_skipped_even_when_degraded() -> None:
    pool = EndpointPool()
    add_pod(pool, "dead", age=5.0, stale=True, failures=3)
    add_pod(pool, "alive-stale", age=5.0, stale=True, failures=0)
    s = scheduler(pool)
    names = {dispatch(pool, s, req(f"q{n}")) for n in range(6)}
    assert names == {"alive-stale"}


def test_a_pod_whose_last_scrape_failed_is_avoided_at_once() -> None:
    pool = EndpointPool()
    add_pod(pool, "flaky", failures=1)  # metrics still recent, but the pod stopped answering
    add_pod(pool, "ok", waiting=3)
    assert scheduler(pool).schedule(req()).pod.name == "ok"


def test_never_scraped_pods_take_traffic_at_cold_start() -> None:
    pool = EndpointPool()
    add_pod(pool, "new1", scraped=False)
    add_pod(pool, "new2", scraped=False)
    s = scheduler(pool)
    picks = Counter(dispatch(pool, s, req(f"q{n}")) for n in range(4))
    assert picks == {"new1": 2, "new2": 2}
    assert get(pool, "new1").inflight == 2
