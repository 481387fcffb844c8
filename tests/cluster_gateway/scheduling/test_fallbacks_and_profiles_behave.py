"""Ranked fallbacks reach past the filters, and the built-in profiles differ the way they claim."""

from __future__ import annotations

from cluster_gateway.pool import EndpointPool
from common.config.gateway import Profile, Scheduling

from .podfactory import add_pod, req, scheduler


def test_fallbacks_include_pods_the_filters_set_aside() -> None:
    pool = EndpointPool()
    add_pod(pool, "best", waiting=0)
    add_pod(pool, "saturated", waiting=9)
    add_pod(pool, "late", age=5.0)
    add_pod(pool, "dead", failures=3, stale=True)
    res = scheduler(pool).schedule(req())
    names = [p.name for p in res.pods]
    assert names[0] == "best"
    assert set(names) == {"best", "saturated", "late"}  # never the dead one
    assert res.scores["total"] > 0


def test_ranked_list_is_capped_for_large_pools() -> None:
    pool = EndpointPool()
    for i in range(50):
        add_pod(pool, f"p{i}", waiting=i % 4)
    res = scheduler(pool).schedule(req())
    assert len(res.pods) == 10
    assert len({p.name for p in res.pods}) == 10
    assert res.pods[0].metrics is not None and res.pods[0].metrics.waiting == 0


def test_throughput_packs_by_kv_headroom_where_latency_avoids_the_queue() -> None:
    pool = EndpointPool()
    add_pod(pool, "short-queue-full-kv", waiting=0, running=60, kv=0.75)
    add_pod(pool, "queued-empty-kv", waiting=4, running=60, kv=0.05)
    s = scheduler(pool)
    assert s.schedule(req(profile="latency")).pod.name == "short-queue-full-kv"
    assert s.schedule(req(profile="throughput")).pod.name == "queued-empty-kv"


def test_degraded_decisions_report_inflight_scores_only() -> None:
    pool = EndpointPool()
    add_pod(pool, "a", stale=True, inflight=3)
    add_pod(pool, "b", stale=True, inflight=1)
    res = scheduler(pool).schedule(req())
    assert res.degraded
    assert res.pod.name == "b"
    assert set(res.scores) == {"inflight", "total"}


def test_kv_projection_counts_prompts_sent_since_the_scrape() -> None:
    pool = EndpointPool()
    big = "x" * 40_000  # ~10k tokens; each pod holds 4096 x 16 = 65k tokens
    add_pod(pool, "got-a-burst", kv=0.30, dispatched=3, num_gpu_blocks=4096, block_size=16)
    add_pod(pool, "quiet", kv=0.40, num_gpu_blocks=4096, block_size=16)
    kv_only = Scheduling(profiles={"kv": Profile(weights={"kv_cache": 1.0})})
    res = scheduler(pool, kv_only).schedule(req(big, profile="kv"))
    assert res.pod.name == "quiet"
    assert abs(res.scores["kv_cache"] - 0.60) < 1e-9
    raw = Scheduling(profiles={"kv": Profile(weights={"kv_raw": 1.0})})
    assert scheduler(pool, raw).schedule(req(big, profile="kv")).pod.name == "got-a-burst"
