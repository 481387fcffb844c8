"""The routing bench's scenario registry: each scenario is seeded data whose trace and fleet say what
its name promises, `lora-scarce` is the first headline's trace unchanged, and the peers' `@tuned` rows
add their documented flags to the very same command line as the default rows."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from bench.routing import (
    PEER_POLICIES,
    PEER_TUNING,
    Setup,
    _gateway_command,
    _peer_command,
    _sim_command,
    peer_flags,
    pod_speeds,
)
from bench.routing_scenarios import SCENARIOS, get
from bench.trace import generate
from cluster_gateway.pool import EndpointPool
from cluster_gateway.scheduling.kv_fit import KVFitFilter
from cluster_gateway.scheduling.pod_speed import SPEED_ANNOTATION
from cluster_gateway.scheduling.profiles import BUILTIN_PROFILES
from cluster_gateway.scheduling.scheduler import Scheduler
from common.config.gateway import GatewaySpec, StaticEndpoint
from common.config.loader import load_config
from common.tokens import count_tokens
from modelsim.fleet import PodSpec


def test_the_suite_has_every_workload_of_the_issue() -> None:
    assert list(SCENARIOS) == [
        "lora-scarce",
        "lora-ample",
        "no-adapters",
        "long-shared-prefix",
        "long-context-mix",
        "heterogeneous",
        "steady",
    ]
    with pytest.raises(ValueError, match="unknown scenario 'nope'; known: lora-scarce"):
        get("nope")


@pytest.mark.parametrize("name", list(SCENARIOS))
def test_every_scenario_is_seeded_and_has_a_shorter_quick_form(name: str) -> None:
    sc = SCENARIOS[name]
    full, quick = generate(sc.trace_for(False)), generate(sc.trace_for(True))
    assert full == generate(sc.trace_for(False))  # deterministic
    assert 0 < len(quick) < len(full)
    assert max(r.at_s for r in quick) < sc.quick_duration_s
    assert generate(sc.trace_for(True, seed=8)) != quick


def test_lora_scarce_is_the_first_headlines_trace() -> None:
    """589 requests over 120 s and 200 over 40 s, as in bench/RESULTS.md before the suite existed."""
    sc = get("lora-scarce")
    assert (len(generate(sc.trace_for(False))), len(generate(sc.trace_for(True)))) == (589, 200)
    assert sc.pod_count == 8 and sc.pods[0].max_lora == 2 and len(sc.pods[0].adapters) == 6
    assert get("lora-ample").pods[0].max_lora >= len(get("lora-ample").pods[0].adapters)


def test_no_adapter_scenarios_send_only_base_model_requests() -> None:
    for name in ("no-adapters", "long-shared-prefix", "long-context-mix", "heterogeneous", "steady"):
        sc = get(name)
        assert {r.model for r in generate(sc.trace_for(True))} == {sc.trace.base_model}, name


def test_long_shared_prefix_has_a_few_4_to_8k_prefixes_and_short_questions() -> None:
    reqs = generate(get("long-shared-prefix").trace_for(True))
    systems = {r.messages[0][1] for r in reqs}
    assert 2 <= len(systems) <= 8
    assert all(3_900 <= count_tokens(s) <= 8_100 for s in systems)
    assert all(count_tokens(r.messages[-1][1]) <= 110 for r in reqs)


def test_long_context_mix_has_a_few_16_to_32k_documents_among_chats() -> None:
    reqs = generate(get("long-context-mix").trace_for(False))
    huge = [r for r in reqs if r.kind == "huge"]
    assert 0 < len(huge) < len(reqs) * 0.1
    assert all(15_900 <= count_tokens(r.messages[-1][1]) <= 32_100 and r.stream for r in huge)


def test_steady_has_no_bursts() -> None:
    reqs = generate(get("steady").trace_for(False))
    per_5s = [sum(1 for r in reqs if k * 5 <= r.at_s < (k + 1) * 5) for k in range(24)]
    assert max(per_5s) < 2.5 * (sum(per_5s) / len(per_5s))


@pytest.mark.parametrize("name", list(SCENARIOS))
def test_the_fleet_spec_is_one_the_simulator_accepts(name: str, tmp_path: Path) -> None:
    sc = SCENARIOS[name]
    cmd = _sim_command(Setup(sc, 1.0, sc.trace), tmp_path)
    assert cmd[cmd.index("--base-port") + 1] == "0"  # pods bind port 0 and say where they listen
    entries = yaml.safe_load((tmp_path / "pods.yaml").read_text())["pods"]
    assert sum(e["replicas"] for e in entries) == sc.pod_count
    for e in entries:
        PodSpec(
            profile=e["profile"],
            adapters=e["adapters"],
            max_lora=e["maxLora"],
            kv_capacity_tokens=e.get("kvCapacityTokens"),
        ).validate()
    if name == "heterogeneous":
        assert {e["profile"] for e in entries} == {"h100-llama3-8b", "l4-llama3-8b"}


def test_tuned_peer_rows_add_the_documented_flags_to_the_default_command() -> None:
    assert "sglang:cache_aware" in PEER_POLICIES and "sglang:cache_aware@tuned" in PEER_POLICIES
    assert peer_flags("vllm:cache_aware") == ()
    assert peer_flags("vllm:cache_aware@tuned") == PEER_TUNING["cache_aware"]
    assert peer_flags("sglang:power_of_two@tuned") == ("--worker-startup-check-interval", "1")
    default = _peer_command("sglang:cache_aware", ["http://127.0.0.1:1"], 9, metrics_port=10)
    tuned = _peer_command("sglang:cache_aware@tuned", ["http://127.0.0.1:1"], 9, metrics_port=10)
    if default is None or tuned is None:
        pytest.skip("sglang-router not installed in .venv-peers")
    assert [a for a in tuned if a not in default] == [
        "--balance-abs-threshold",
        "4",
        "--balance-rel-threshold",
        "1.2",
    ]
    assert tuned[tuned.index("--policy") + 1] == "cache_aware"


def test_reference_profile_is_the_inference_extensions_default_config() -> None:
    """GIE's default-plugins.yaml: queue-scorer 2, kv-cache-utilization-scorer 2, prefix-cache-scorer
    3, max-score picker, nothing else."""
    ref = BUILTIN_PROFILES["reference"]
    assert dict(ref.weights) == {"queue_waiting": 2.0, "kv_raw": 2.0, "prefix_raw": 3.0}
    assert ref.picker == "max_score" and ref.filters == ("model", "healthy") and ref.plugins == ()


def test_the_bench_gateway_config_compiles_with_its_opt_in_profile(tmp_path: Path) -> None:
    """`latency+kv_fit` is `latency` (weights and filters as built in today) plus the `kv_fit` filter,
    in a config the gateway's own loader and scheduler accept."""
    cmd = _gateway_command(["http://127.0.0.1:9"], 1, tmp_path, 1.0)
    spec = load_config(cmd[cmd.index("--config") + 1], GatewaySpec)
    sched = Scheduler(EndpointPool(), spec.scheduling)
    assert {"latency", "latency+kv_fit", "random"} <= set(sched.profile_names())
    latency = BUILTIN_PROFILES["latency"]
    extra = spec.scheduling.profiles["latency+kv_fit"]
    assert extra.weights == latency.weights
    assert extra.filters == [*latency.filters, "kv_fit"]
    assert isinstance(sched.plugin("kv_fit"), KVFitFilter)


def test_only_a_mixed_pool_gets_the_prefill_speed_annotation(tmp_path: Path) -> None:
    """heterogeneous: each pod says its GPU's prefill speed (H100 ~9x an L4), as an operator would
    annotate each deployment; a uniform pool says nothing, so its routing is what it always was."""
    het, uniform = get("heterogeneous"), get("lora-scarce")
    urls = [f"http://127.0.0.1:{9000 + i}" for i in range(het.pod_count)]

    def endpoints(speeds: list[float]) -> list[StaticEndpoint | str]:
        cmd = _gateway_command(urls, 1, tmp_path, 1.0, speeds)
        static = load_config(cmd[cmd.index("--config") + 1], GatewaySpec).discovery.static
        assert static is not None
        return static.endpoints

    eps = endpoints(pod_speeds(het, 1.0))
    speeds = [float(e.annotations[SPEED_ANNOTATION]) for e in eps if not isinstance(e, str)]
    assert len(speeds) == 8 and 8.0 < speeds[0] / speeds[-1] < 10.0
    assert endpoints(pod_speeds(uniform, 1.0)) == urls


def test_a_merge_run_keeps_the_earlier_policies_and_replaces_the_rerun_ones(tmp_path: Path) -> None:
    from bench.loadgen import Result
    from bench.routing import PolicyRun, _merged, run_from_json, run_to_json
    from bench.stats import summarise

    def run(policy: str, ttft: float) -> PolicyRun:
        r = PolicyRun(policy, [Result(0.0, "chat", "m", 200, ttft, 1.0, 5)], 2.0)
        r.pod_requests, r.load, r.machine_load = {"http://a": 1}, {"http://a": [(0.5, 1.0)]}, 1.5
        r.summary = summarise(policy, r.results, r.wall_s, 0.0)
        return r

    old = [run("round-robin", 3.0), run("latency", 2.0)]
    path = tmp_path / "routing_x_quick.json"
    path.write_text(
        json.dumps({"scenario": "x", "quick": True, "requests": 1, "runs": [run_to_json(r) for r in old]})
    )
    assert run_from_json(json.loads(json.dumps(run_to_json(old[0])))) == old[0]
    merged = _merged([run("latency", 1.0), run("reference", 4.0)], path, "x", True, 1)
    assert [(r.policy, r.results[0].ttft_s) for r in merged] == [
        ("round-robin", 3.0),
        ("latency", 1.0),
        ("reference", 4.0),
    ]
    assert [r.policy for r in _merged([run("latency", 1.0)], path, "x", True, 2)] == [
        "latency"
    ]  # another trace


def test_a_port_taken_between_check_and_bind_is_retried_on_other_ports(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    import bench.routing as routing

    calls: list[int] = []

    def once(policy: str, setup: Setup, trace: object, workdir: Path) -> routing.PolicyRun:
        calls.append(1)
        if len(calls) < 3:
            raise routing._PortTaken("cannot listen: [Errno 98] Address already in use")
        return routing.PolicyRun(policy, [], 1.0)

    monkeypatch.setattr(routing, "_run_policy_once", once)
    sc = get("steady")
    run = routing.run_policy("latency", Setup(sc, 1.0, sc.trace), [], tmp_path)
    assert run is not None and run.policy == "latency" and len(calls) == 3
    calls.clear()

    def always_taken(*args: object) -> routing.PolicyRun:
        raise routing._PortTaken("taken")

    monkeypatch.setattr(routing, "_run_policy_once", always_taken)
    with pytest.raises(routing._PortTaken):
        routing.run_policy("latency", Setup(sc, 1.0, sc.trace), [], tmp_path, attempts=2)
