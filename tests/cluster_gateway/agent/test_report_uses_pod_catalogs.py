"""Reports fold each pod's exact catalog: base models are models, adapters sit under their parent,
idle or not; the classification rules only cover pods whose lists did not say."""

from __future__ import annotations

from cluster_gateway.agent.aggregate import build_report, significant_state
from cluster_gateway.pool import EndpointPool
from common.config.gateway import Saturation
from common.proto.fleetgate.v1 import capacity_pb2
from modelsim import fleet as fleet_mod
from tests.cluster_gateway.agent.pools import add_pod, make_spec
from tests.cluster_gateway.metrics.sim_pool import read_pods_once, sim_pool

SAT = Saturation(queue_depth=5, kv_usage=0.8)


def by_model(report: capacity_pb2.CapacityReport) -> dict[str, capacity_pb2.ModelCapacity]:
    return {m.model: m for m in report.models}


async def test_report_from_simulated_pods_names_base_models_and_adapters_exactly() -> None:
    specs = [
        # Two llama pods list the same idle adapters: no engine runs them, so no gauge says what they are.
        fleet_mod.PodSpec(profile="tiny", model="llama", adapters=["sql-lora", "chat-lora"]),
        fleet_mod.PodSpec(profile="tiny", model="llama", adapters=["sql-lora"]),
        fleet_mod.PodSpec(
            profile="tiny", model="qwen", adapters=["math-lora"], preload_adapters=["math-lora"]
        ),
        fleet_mod.PodSpec(profile="tiny", model="qwen", metrics_format="tgi"),
    ]
    async with fleet_mod.SimFleet(specs) as fleet:
        pool = sim_pool(fleet)
        await read_pods_once(pool, metrics=True)
        report = build_report(make_spec(), pool, 1, SAT)

    m = by_model(report)
    assert set(m) == {"llama", "qwen"}, "adapters must never be reported as models"
    assert m["llama"].ready_pods == 2 and m["qwen"].ready_pods == 2
    assert list(m["llama"].adapters_available) == ["chat-lora", "sql-lora"]
    assert list(m["qwen"].adapters_available) == ["math-lora"]
    assert list(m["llama"].adapters_resident) == []


def test_idle_adapters_listed_by_every_pod_fold_under_their_parent() -> None:
    pool = EndpointPool()
    add_pod(pool, "a", models={"llama"}, catalog={"idle-lora": "llama"})
    add_pod(pool, "b", models={"llama"}, catalog={"idle-lora": "llama"})
    m = by_model(build_report(make_spec(), pool, 1, SAT))
    assert set(m) == {"llama"}
    assert list(m["llama"].adapters_available) == ["idle-lora"]
    assert m["llama"].ready_pods == 2


def test_a_pod_with_two_base_models_puts_each_adapter_under_its_own_parent() -> None:
    pool = EndpointPool()
    add_pod(pool, "multi", models={"llama", "qwen"}, catalog={"sql-lora": "llama", "math-lora": "qwen"})
    add_pod(pool, "orphan", models={"llama"}, catalog={"odd-lora": "/models/llama"})  # parent not listed
    m = by_model(build_report(make_spec(), pool, 1, SAT))
    assert set(m) == {"llama", "qwen"}
    assert list(m["llama"].adapters_available) == ["odd-lora", "sql-lora"]
    assert list(m["qwen"].adapters_available) == ["math-lora"]
    assert m["llama"].ready_pods == 2 and m["qwen"].ready_pods == 1


def test_exact_catalogs_resolve_pods_whose_lists_lack_parent_info() -> None:
    pool = EndpointPool()
    add_pod(pool, "exact", models={"llama"}, catalog={"sql-lora": "llama"})
    add_pod(pool, "names", models={"llama", "sql-lora", "chat-lora"})  # kinds unknown
    m = by_model(build_report(make_spec(), pool, 1, SAT))
    assert set(m) == {"llama"}
    assert list(m["llama"].adapters_available) == ["chat-lora", "sql-lora"]
    assert m["llama"].ready_pods == 2


def test_a_pod_without_a_known_list_counts_for_the_only_base_model() -> None:
    pool = EndpointPool()
    add_pod(pool, "exact", models={"llama"}, catalog={"sql-lora": "llama"})
    add_pod(pool, "cold", models=set())
    m = by_model(build_report(make_spec(), pool, 1, SAT))
    assert set(m) == {"llama"} and m["llama"].ready_pods == 2


def test_a_name_turning_into_an_adapter_is_a_significant_change() -> None:
    pool = EndpointPool()
    add_pod(pool, "p", models={"llama", "x"})
    before = significant_state(pool, SAT, 1.0)
    pool.set_catalog("p", ["llama"], {"x": "llama"})
    assert significant_state(pool, SAT, 1.0) != before
