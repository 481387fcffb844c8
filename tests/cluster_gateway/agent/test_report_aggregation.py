"""build_report folds a hand-built pool into per-base-model capacity figures."""

from __future__ import annotations

import pytest

from cluster_gateway.agent.aggregate import ServiceModel, build_report, significant_state
from cluster_gateway.pool import EndpointPool
from common.config.gateway import CapacityInfo, Saturation
from common.proto.fleetgate.v1 import capacity_pb2
from tests.cluster_gateway.agent.pools import add_pod, make_spec

SAT = Saturation(queue_depth=5, kv_usage=0.8)


def by_model(report: capacity_pb2.CapacityReport) -> dict[str, capacity_pb2.ModelCapacity]:
    return {m.model: m for m in report.models}


def test_counts_ready_saturated_queued_and_running_per_base_model() -> None:
    pool = EndpointPool()
    add_pod(pool, "p1", models={"llama"}, waiting=0, running=4, kv=0.2)
    add_pod(pool, "p2", models={"llama"}, waiting=6, running=10, kv=0.5)  # saturated by queue
    add_pod(pool, "p3", models={"llama"}, waiting=1, running=8, kv=0.9)  # saturated by KV
    add_pod(pool, "p4", models={"llama"}, scraped=False)  # never scraped: not ready
    add_pod(pool, "q1", models={"qwen"}, waiting=2, running=3, kv=0.4)
    report = build_report(make_spec(), pool, 1, SAT)
    m = by_model(report)
    assert set(m) == {"llama", "qwen"}
    llama = m["llama"]
    assert llama.ready_pods == 3
    assert llama.saturated_pods == 2
    assert llama.queued == 7
    assert llama.running == 22
    assert llama.kv_headroom == pytest.approx(((1 - 0.2) + (1 - 0.5) + (1 - 0.9)) / 3)
    assert m["qwen"].ready_pods == 1 and m["qwen"].queued == 2
    assert report.gpus == 5  # every pod in the pool is provisioned capacity


def test_stale_or_old_metrics_do_not_count_as_ready() -> None:
    pool = EndpointPool()
    add_pod(pool, "fresh", models={"m"}, running=1)
    add_pod(pool, "old", models={"m"}, running=50, age_s=30.0)  # older than maxStalenessMs
    add_pod(pool, "dead", models={"m"}, running=50)
    pool.record_scrape_failure("dead", stale_after=1)
    m = by_model(build_report(make_spec(), pool, 1, SAT))["m"]
    assert m.ready_pods == 1
    assert m.running == 1


def test_adapters_are_names_engines_report_as_lora_and_sit_under_their_base_model() -> None:
    pool = EndpointPool()
    add_pod(pool, "p1", models={"llama", "sql-lora", "chat-lora"}, running=2, adapters={"sql-lora"})
    add_pod(pool, "p2", models={"llama", "chat-lora"}, running=1, waiting_adapters={"chat-lora"})
    report = build_report(make_spec(), pool, 1, SAT)
    m = by_model(report)
    assert set(m) == {"llama"}, "adapters must not be reported as models of their own"
    assert list(m["llama"].adapters_resident) == ["sql-lora"]
    assert list(m["llama"].adapters_available) == ["chat-lora", "sql-lora"]


def test_headroom_is_room_before_saturation_and_zero_when_saturated() -> None:
    svc = ServiceModel()
    pool = EndpointPool()
    # 10 running at 0.5 KV: ~20 fit, 16 below the 0.8 threshold -> 6 more in KV, plus 4 in the queue.
    add_pod(pool, "a", models={"m"}, running=10, kv=0.5)
    add_pod(pool, "b", models={"m"}, waiting=5, running=10, kv=0.5)  # saturated: no headroom
    m = by_model(build_report(make_spec(), pool, 1, SAT, service=svc))["m"]
    assert m.headroom_requests == 6 + 4

    pool.acquire("a")
    pool.acquire("a")  # two requests dispatched since the last scrape eat into the headroom
    m = by_model(build_report(make_spec(), pool, 2, SAT, service=svc))["m"]
    assert m.headroom_requests == 8


def test_headroom_without_a_kv_gauge_uses_the_default_concurrency() -> None:
    svc = ServiceModel(default_concurrency=8)
    pool = EndpointPool()
    add_pod(pool, "tgi", models={"m"}, running=3, kv=None, engine="tgi")
    m = by_model(build_report(make_spec(), pool, 1, SAT, service=svc))["m"]
    assert m.headroom_requests == (8 - 3) + 4
    assert m.kv_headroom == 1.0  # no KV gauge: share of unsaturated pods


def test_estimated_ttft_grows_with_the_queue_and_is_prefill_on_an_idle_pod() -> None:
    svc = ServiceModel(prefill_ms=50.0, decode_tokens_per_s=50.0, mean_output_tokens=100.0)
    idle, busy, busier = EndpointPool(), EndpointPool(), EndpointPool()
    add_pod(idle, "p", models={"m"}, running=0, kv=0.0)
    add_pod(busy, "p", models={"m"}, waiting=2, running=20, kv=1.0)  # KV full: requests wait for slots
    add_pod(busier, "p", models={"m"}, waiting=4, running=20, kv=1.0)
    ttft = [
        by_model(build_report(make_spec(), p, 1, SAT, service=svc))["m"].est_ttft_ms
        for p in (idle, busy, busier)
    ]
    assert ttft[0] == pytest.approx(50.0)
    # busy: C = 20 / 1.0 = 20 slots, S = 2 s -> 10 req/s; 3 ahead (2 waiting + itself) -> +300 ms
    assert ttft[1] == pytest.approx(50.0 + 300.0)
    assert ttft[2] > ttft[1]


def test_cluster_ttft_is_that_of_the_best_unsaturated_pod() -> None:
    svc = ServiceModel(prefill_ms=50.0)
    pool = EndpointPool()
    add_pod(pool, "idle", models={"m"}, running=0, kv=0.0)
    add_pod(pool, "hot", models={"m"}, waiting=9, running=30, kv=0.95)
    m = by_model(build_report(make_spec(), pool, 1, SAT, service=svc))["m"]
    assert m.est_ttft_ms == pytest.approx(50.0)


def test_pod_with_unknown_models_counts_for_the_only_base_model() -> None:
    pool = EndpointPool()
    add_pod(pool, "known", models={"m"}, running=1)
    add_pod(pool, "cold", models=set(), running=2)
    assert by_model(build_report(make_spec(), pool, 1, SAT))["m"].ready_pods == 2


def test_cluster_fields_come_from_the_spec() -> None:
    spec = make_spec(
        capacity=CapacityInfo(cost_per_gpu_hour=1.25, capacity_type="spot", draining=True, gpus_per_pod=2)
    )
    pool = EndpointPool()
    add_pod(pool, "p", models={"m"})
    r = build_report(spec, pool, 42, SAT, wall_time=1_700_000_000.5)
    assert (r.cluster_id, r.region, r.zone) == ("c-a", "eu-west", "eu-west-1a")
    assert r.gateway_url == "http://c-a.example:8080"
    assert r.sequence == 42
    assert r.sent_at.ToMilliseconds() == 1_700_000_000_500
    assert r.capacity_type == capacity_pb2.CAPACITY_TYPE_SPOT
    assert r.draining is True
    assert r.cost_per_gpu_hour == 1.25
    assert r.gpus == 2


def test_significant_state_changes_when_a_pod_saturates_or_goes_stale_but_not_on_small_moves() -> None:
    pool = EndpointPool()
    add_pod(pool, "p", models={"m"}, waiting=1, running=3, kv=0.3)
    base = significant_state(pool, SAT, 1.0)
    add_pod(pool, "p", models={"m"}, waiting=2, running=4, kv=0.35)
    assert significant_state(pool, SAT, 1.0) == base
    add_pod(pool, "p", models={"m"}, waiting=6, running=4, kv=0.35)
    saturated = significant_state(pool, SAT, 1.0)
    assert saturated != base
    pool.record_scrape_failure("p", stale_after=1)
    assert significant_state(pool, SAT, 1.0) != saturated


def test_idle_adapters_fold_under_the_base_model_that_other_pods_list_alone() -> None:
    pool = EndpointPool()
    add_pod(pool, "plain", models={"llama"})
    add_pod(pool, "lora", models={"llama", "sql-lora", "chat-lora"})  # no adapter activity yet
    m = by_model(build_report(make_spec(), pool, 1, SAT))
    assert set(m) == {"llama"}
    assert m["llama"].ready_pods == 2
    assert list(m["llama"].adapters_available) == ["chat-lora", "sql-lora"]
    assert list(m["llama"].adapters_resident) == []


def test_unresolvable_names_are_reported_as_models_so_they_stay_routable() -> None:
    pool = EndpointPool()
    add_pod(pool, "a", models={"llama", "idle-lora"})
    add_pod(pool, "b", models={"llama", "idle-lora"})
    m = by_model(build_report(make_spec(), pool, 1, SAT))
    assert set(m) == {"llama", "idle-lora"}
    assert m["llama"].ready_pods == m["idle-lora"].ready_pods == 2
