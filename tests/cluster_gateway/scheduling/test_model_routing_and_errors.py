"""Only pods serving the model are candidates; an unknown model is a 404, no usable pod a 503."""

from __future__ import annotations

import pytest

from cluster_gateway.pool import EndpointPool
from common.errors import OpenAIError

from .podfactory import MODEL, add_pod, dispatch, req, scheduler


def test_unknown_model_is_a_404_model_not_found() -> None:
    pool = EndpointPool()
    add_pod(pool, "a")
    with pytest.raises(OpenAIError) as ei:
        scheduler(pool).schedule(req(model="gpt-9"))
    assert ei.value.status == 404
    assert ei.value.code == "model_not_found"
    assert ei.value.param == "model"


def test_only_pods_serving_the_model_are_picked() -> None:
    pool = EndpointPool()
    add_pod(pool, "llama", models=(MODEL,), kv=0.7)
    add_pod(pool, "qwen", models=("qwen-7b",), kv=0.0)
    s = scheduler(pool)
    assert {s.schedule(req()).pod.name for _ in range(10)} == {"llama"}
    assert s.schedule(req(model="qwen-7b")).pods[0].name == "qwen"


def test_pod_with_unknown_models_counts_as_serving_its_peers_base_models() -> None:
    pool = EndpointPool()
    add_pod(pool, "known", models=(MODEL, "sql-lora"), running_adapters={"sql-lora"}, max_lora=2, waiting=3)
    add_pod(pool, "just-joined", models=())  # /v1/models not fetched yet: the idle new capacity
    s = scheduler(pool)
    assert s.schedule(req()).pod.name == "just-joined"
    assert s.schedule(req(model="sql-lora")).pods[0].name == "known"  # adapters are not assumed


def test_no_known_models_anywhere_lets_every_pod_through() -> None:
    pool = EndpointPool()
    add_pod(pool, "a", models=())
    add_pod(pool, "b", models=())
    s = scheduler(pool)
    assert {dispatch(pool, s, req()) for _ in range(2)} == {"a", "b"}


def test_served_but_never_scraped_and_dead_is_a_503_no_healthy_endpoint() -> None:
    pool = EndpointPool()
    add_pod(pool, "a", failures=5, stale=True, scraped=False)
    with pytest.raises(OpenAIError) as ei:
        scheduler(pool).schedule(req())
    assert ei.value.status == 503
    assert ei.value.code == "no_healthy_endpoint"


def test_every_pod_failing_its_scrapes_at_once_keeps_routing_degraded() -> None:
    """Suspect yourself first: a whole pool failing its scrapes together is likelier this gateway's
    own starved loop than every pod dying at once; real request failures eject the dead ones."""
    pool = EndpointPool()
    add_pod(pool, "a", failures=5, stale=True)
    add_pod(pool, "b", failures=5, stale=True)
    result = scheduler(pool).schedule(req())
    assert {p.name for p in result.pods} == {"a", "b"}
    assert result.degraded


def test_one_dead_pod_among_live_ones_is_still_skipped() -> None:
    pool = EndpointPool()
    add_pod(pool, "dead", failures=5, stale=True)
    add_pod(pool, "live")
    s = scheduler(pool)
    assert {s.schedule(req()).pods[0].name for _ in range(10)} == {"live"}


def test_empty_pool_is_a_503() -> None:
    with pytest.raises(OpenAIError) as ei:
        scheduler(EndpointPool()).schedule(req())
    assert ei.value.status == 503
    assert ei.value.code == "no_healthy_endpoint"


def test_departed_pods_are_forgotten_by_the_prefix_index() -> None:
    pool = EndpointPool()
    add_pod(pool, "a")
    add_pod(pool, "b")
    s = scheduler(pool)
    dispatch(pool, s, req("x" * 640))
    dispatch(pool, s, req("y" * 640))
    index = s.plugin("prefix_index").index  # type: ignore[attr-defined]
    assert sorted(index.pods()) == ["a", "b"]
    pool.remove("a")
    s.schedule(req())
    assert index.pods() == ["b"]
