"""A shared system prompt sticks to the pod caching it, but never at the cost of a saturated pod."""

from __future__ import annotations

from collections import Counter

from cluster_gateway.pool import EndpointPool

from .podfactory import add_pod, dispatch, get, req, scheduler

SYSTEM = "You are a meticulous assistant for the ACME support desk. " * 40  # ~2400 chars


def test_shared_system_prompt_sticks_to_the_pod_holding_its_prefix() -> None:
    pool = EndpointPool()
    for name in ("a", "b", "c", "d"):
        add_pod(pool, name, running=4)
    s = scheduler(pool)
    warm = dispatch(pool, s, req(SYSTEM + "user: first question"))
    p = pool.get(warm)
    assert p is not None
    p.inflight = p.dispatched_since_scrape = 0  # that request finished; a scrape came
    res = s.schedule(req(SYSTEM + "user: a different question"))
    assert res.pod.name == warm
    assert res.scores["prefix"] > 0.9


def test_prefix_does_not_win_over_a_saturated_pod() -> None:
    pool = EndpointPool()
    for name in ("a", "b", "c"):
        add_pod(pool, name)
    s = scheduler(pool)
    warm = dispatch(pool, s, req(SYSTEM + "user: first"))
    p = pool.get(warm)
    assert p is not None and p.metrics is not None
    p.inflight = p.dispatched_since_scrape = 0
    p.metrics.waiting = 6  # at the saturation depth (5)
    res = s.schedule(req(SYSTEM + "user: second"))
    assert res.pod.name != warm
    p.metrics.waiting = 0
    p.metrics.kv_usage = 0.9  # over the KV threshold: it would evict the prefix anyway
    assert s.schedule(req(SYSTEM + "user: third")).pod.name != warm


def test_hot_prefix_spreads_once_its_pod_is_busy() -> None:
    """Cache-aware routing must not pile a popular prompt onto one pod (the reference does)."""
    pool = EndpointPool()
    for i in range(4):
        add_pod(pool, f"p{i}")
    s = scheduler(pool)
    picks = Counter(dispatch(pool, s, req(SYSTEM + f"user: question {n}")) for n in range(24))
    assert len(picks) >= 2
    assert max(picks.values()) <= 12


def test_prefix_affinity_is_proportional_to_the_matched_share() -> None:
    pool = EndpointPool()
    add_pod(pool, "a")
    add_pod(pool, "b")
    s = scheduler(pool)
    s.on_dispatch(req(SYSTEM[:640]), get(pool, "a"))
    s.on_dispatch(req(SYSTEM[:1280]), get(pool, "b"))
    res = s.schedule(req(SYSTEM[:1280]))
    assert res.pod.name == "b"
    assert res.scores["prefix"] == 1.0
    ranked = {p.name for p in res.pods}
    assert ranked == {"a", "b"}


def test_prefix_affinity_survives_filters_reordering_the_candidates() -> None:
    pool = EndpointPool()
    add_pod(pool, "saturated", waiting=9)
    add_pod(pool, "plain")
    add_pod(pool, "warm")
    s = scheduler(pool)
    s.on_dispatch(req(SYSTEM), get(pool, "warm"))
    res = s.schedule(req(SYSTEM + "user: hi"))
    assert res.pod.name == "warm"  # found at candidate position 1, not its pool position 2
    assert res.scores["prefix"] > 0.9


def test_an_adapters_prefix_is_its_own_not_the_base_models() -> None:
    """Engines cache an adapter's KV blocks apart from the base model's (vLLM hashes the adapter into
    every block, SGLang keeps a tree per adapter). A system prompt warm for the base model on one pod
    is cold there for an adapter; once that adapter has run it, the adapter's repeat finds that pod."""
    pool = EndpointPool()
    for name in ("a", "b", "c", "d"):
        add_pod(pool, name, running=4, adapters=["sql-lora"], max_lora=4)
    s = scheduler(pool)
    base_pod = dispatch(pool, s, req(SYSTEM + "user: first question"))
    get(pool, base_pod).inflight = get(pool, base_pod).dispatched_since_scrape = 0
    first = s.schedule(req(SYSTEM + "user: second question", model="sql-lora"))
    assert first.scores["prefix"] == 0.0  # no pod holds the adapter's blocks yet
    lora_pod = dispatch(pool, s, req(SYSTEM + "user: second question", model="sql-lora"))
    get(pool, lora_pod).inflight = get(pool, lora_pod).dispatched_since_scrape = 0
    again = s.schedule(req(SYSTEM + "user: third question", model="sql-lora"))
    assert again.pod.name == lora_pod and again.scores["prefix"] > 0.9
    base_again = s.schedule(req(SYSTEM + "user: fourth question"))
    assert base_again.scores["prefix"] > 0.9 and base_again.pod.name == base_pod
