"""A model some pod lists as a LoRA adapter is an adapter request from its first request on: only
pods listing it are candidates (never a pod whose list is unknown yet), and LoRA affinity applies
before any scrape shows the adapter running anywhere."""

from __future__ import annotations

import pytest

from cluster_gateway.pool import EndpointPool
from common.errors import OpenAIError

from .podfactory import MODEL, add_pod, dispatch, req, scheduler


def test_adapter_request_goes_only_to_pods_listing_it_though_none_has_it_resident() -> None:
    pool = EndpointPool()
    add_pod(pool, "x-busy", adapters=["sql-lora"], max_lora=4, waiting=3, running=8, kv=0.5)
    add_pod(pool, "x", adapters=["sql-lora", "chat-lora"], max_lora=4, waiting=2, running=6, kv=0.4)
    add_pod(pool, "no-x-idle", adapters=["chat-lora"], max_lora=4, kv=0.0)
    add_pod(pool, "just-joined", models=(), max_lora=4, kv=0.0)  # /v1/models not fetched yet
    s = scheduler(pool)
    for n in range(20):
        res = s.schedule(req(f"q{n}", model="sql-lora"))
        assert {p.name for p in res.pods} <= {"x-busy", "x"}, "fallbacks must list the adapter too"
        assert res.scores["lora"] in (0.8, 1.0)  # scored as an adapter: a free slot, not "base model"
        dispatch(pool, s, req(f"d{n}", model="sql-lora"))
    # Base-model requests still take the idle pods, including the one whose list is not known yet.
    assert {dispatch(pool, s, req(f"b{n}")) for n in range(4)} >= {"no-x-idle", "just-joined"}


def test_first_adapter_request_takes_a_free_slot_over_an_eviction_before_any_scrape_shows_it() -> None:
    pool = EndpointPool()
    # Both list sql-lora; nobody runs it. "full" is idle but both its slots hold other adapters.
    add_pod(pool, "full", adapters=["sql-lora", "a", "b"], max_lora=2, running=2, running_adapters={"a", "b"})
    add_pod(pool, "free-slot", adapters=["sql-lora", "a", "b"], max_lora=2, waiting=2)
    res = scheduler(pool).schedule(req(model="sql-lora"))
    assert res.pod.name == "free-slot"
    assert res.scores["lora"] == 0.8
    assert [p.name for p in res.pods] == ["free-slot", "full"]


def test_an_adapter_no_known_pod_lists_is_a_404_even_with_unknown_pods_around() -> None:
    pool = EndpointPool()
    add_pod(pool, "a", adapters=["sql-lora"], max_lora=4)
    add_pod(pool, "just-joined", models=())
    with pytest.raises(OpenAIError) as ei:
        scheduler(pool).schedule(req(model="other-lora"))
    assert ei.value.status == 404


def test_adapter_of_a_listed_pod_excludes_pods_whose_lists_lack_parent_info_only_if_they_lack_it() -> None:
    pool = EndpointPool()
    add_pod(pool, "exact", adapters=["sql-lora"], max_lora=4, waiting=4)
    add_pod(pool, "names-only", models=(MODEL, "sql-lora"), max_lora=4)  # lists it, kinds unknown
    add_pod(pool, "just-joined", models=(), max_lora=4)
    s = scheduler(pool)
    picks = {p.name for n in range(10) for p in s.schedule(req(f"q{n}", model="sql-lora")).pods}
    assert picks == {"exact", "names-only"}


def test_base_model_requests_are_unaffected_by_the_catalog() -> None:
    pool = EndpointPool()
    add_pod(pool, "a", adapters=["sql-lora"], max_lora=4, waiting=1)
    add_pod(pool, "b", adapters=[], max_lora=4)
    res = scheduler(pool).schedule(req(model=MODEL))
    assert res.pod.name == "b"
    assert res.scores["lora"] == 1.0
