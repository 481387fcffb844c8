"""Adapter requests go where the adapter is resident, then where a LoRA slot is free."""

from __future__ import annotations

from cluster_gateway.pool import EndpointPool

from .podfactory import MODEL, add_pod, dispatch, get, req, scheduler

MODELS = (MODEL, "sql-lora", "chat-lora", "math-lora")


def _pool() -> EndpointPool:
    pool = EndpointPool()
    add_pod(pool, "full-no-x", models=MODELS, running_adapters={"chat-lora", "math-lora"}, max_lora=2)
    add_pod(pool, "free-slot", models=MODELS, running_adapters={"chat-lora"}, max_lora=2, waiting=1)
    add_pod(pool, "has-x", models=MODELS, running_adapters={"sql-lora", "math-lora"}, max_lora=2, waiting=1)
    return pool


def test_adapter_goes_to_the_pod_where_it_is_resident() -> None:
    pool = _pool()
    res = scheduler(pool).schedule(req(model="sql-lora"))
    assert res.pod.name == "has-x"
    assert res.scores["lora"] == 1.0


def test_adapter_goes_to_a_free_slot_rather_than_evicting() -> None:
    pool = _pool()
    x = pool.get("has-x")
    assert x is not None and x.metrics is not None
    x.metrics.running_adapters = frozenset({"chat-lora", "math-lora"})  # nobody runs sql-lora now
    x.metrics.waiting_adapters = frozenset({"sql-lora"})  # ... but a request waits for it here
    res = scheduler(pool).schedule(req(model="sql-lora"))
    assert res.pod.name == "free-slot"
    assert res.scores["lora"] == 0.8
    ranked = [p.name for p in res.pods]
    assert ranked.index("has-x") < ranked.index("full-no-x")  # waiting (0.6) beats must-evict (0)


def test_base_model_requests_ignore_lora_slots() -> None:
    pool = _pool()
    res = scheduler(pool).schedule(req(model=MODEL))
    assert res.scores["lora"] == 1.0
    assert res.pod.name == "full-no-x"  # the only pod with an empty queue


def test_adapter_sticks_to_the_pod_it_was_just_sent_to_between_scrapes() -> None:
    pool = EndpointPool()
    add_pod(pool, "a", models=MODELS, running_adapters={"chat-lora"}, max_lora=4)
    add_pod(pool, "b", models=MODELS, running_adapters={"math-lora"}, max_lora=4)
    add_pod(pool, "c", models=MODELS, waiting_adapters={"sql-lora"}, max_lora=4, waiting=1)
    s = scheduler(pool)
    first = dispatch(pool, s, req("q0", model="sql-lora"))
    assert first in ("a", "b")  # free slot and no queue
    # The next scrape has not shown it running there yet; the gateway remembers, so the adapter
    # is not loaded into a second pod's slot.
    res = s.schedule(req("q1", model="sql-lora"))
    assert res.pod.name == first
    assert res.scores["lora"] == 1.0


def test_an_adapter_burst_still_spreads_once_its_pod_is_busy() -> None:
    pool = EndpointPool()
    for name in ("a", "b", "c"):
        add_pod(pool, name, models=MODELS, running_adapters={"chat-lora"}, max_lora=4)
    get(pool, "a").metrics.running_adapters = frozenset({"sql-lora"})  # type: ignore[union-attr]
    s = scheduler(pool)
    picks = [dispatch(pool, s, req(f"q{n}", model="sql-lora")) for n in range(12)]
    assert picks[0] == "a"
    assert len(set(picks)) >= 2
