"""A pod that is visibly loaded (full KV cache, deep queue, busy batch) loses the pick."""

from __future__ import annotations

from collections import Counter

from cluster_gateway.pool import EndpointPool

from .podfactory import add_pod, req, scheduler


def test_pod_with_full_kv_cache_loses() -> None:
    pool = EndpointPool()
    add_pod(pool, "full", kv=0.97)
    add_pod(pool, "roomy", kv=0.2)
    s = scheduler(pool)
    picks = Counter(s.schedule(req()).pod.name for _ in range(50))
    assert picks == {"roomy": 50}


def test_pod_with_deep_queue_loses() -> None:
    pool = EndpointPool()
    add_pod(pool, "deep", waiting=12, kv=0.3)
    add_pod(pool, "idle", waiting=0, kv=0.3)
    s = scheduler(pool)
    res = s.schedule(req())
    assert res.pod.name == "idle"
    assert [p.name for p in res.pods] == ["idle", "deep"]  # the loaded pod stays as a fallback


def test_shallower_queue_wins_when_all_are_below_saturation() -> None:
    pool = EndpointPool()
    add_pod(pool, "q3", waiting=3)
    add_pod(pool, "q1", waiting=1)
    add_pod(pool, "q2", waiting=2)
    res = scheduler(pool).schedule(req())
    assert [p.name for p in res.pods] == ["q1", "q2", "q3"]
    assert not res.saturated


def test_smaller_running_batch_breaks_a_queue_tie() -> None:
    pool = EndpointPool()
    add_pod(pool, "busy", running=200, kv=0.3)
    add_pod(pool, "light", running=3, kv=0.3)
    assert scheduler(pool).schedule(req()).pod.name == "light"


def test_tgi_pods_are_ranked_by_queue_without_a_kv_gauge() -> None:
    pool = EndpointPool()
    add_pod(pool, "tgi-busy", engine="tgi", kv=None, waiting=4, running=8)
    add_pod(pool, "tgi-free", engine="tgi", kv=None, waiting=0, running=2)
    res = scheduler(pool).schedule(req())
    assert res.pod.name == "tgi-free"
    assert res.scores["kv_cache"] == 0.5  # neutral, not a penalty


def test_result_explains_the_decision() -> None:
    pool = EndpointPool()
    add_pod(pool, "a", kv=0.5)
    add_pod(pool, "b", kv=0.1)
    res = scheduler(pool).schedule(req())
    assert res.profile == "latency"
    assert res.pod.name == "b"
    assert {"queue", "kv_cache", "prefix", "inflight", "lora", "load", "total"} <= set(res.scores)
    assert 0.0 <= res.scores["total"] <= 1.0
    assert res.scores["kv_cache"] == 0.9
