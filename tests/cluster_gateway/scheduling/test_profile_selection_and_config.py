"""Profiles: chosen by header, then by model, then the default; config merges and is validated."""

from __future__ import annotations

import pytest

from cluster_gateway.pool import EndpointPool
from cluster_gateway.scheduling import LLMRequest
from common.config import ConfigError, load_config_data
from common.config.gateway import GatewaySpec, Profile, Scheduling
from common.openai_request import parse_request

from .podfactory import add_pod, req, scheduler


def _pool() -> EndpointPool:
    pool = EndpointPool()
    add_pod(pool, "a")
    add_pod(pool, "b", models=("llama-8b", "batch-model"))
    return pool


def test_default_profile_is_latency() -> None:
    assert scheduler(_pool()).schedule(req()).profile == "latency"


def test_header_profile_wins_when_known() -> None:
    parsed = parse_request(b'{"model": "llama-8b", "prompt": "hi"}', "/v1/completions")
    r = LLMRequest.from_parsed(parsed, {"x-fleetgate-profile": "throughput"})
    assert scheduler(_pool()).schedule(r).profile == "throughput"


def test_inference_objective_header_selects_a_profile() -> None:
    parsed = parse_request(b'{"model": "llama-8b", "prompt": "hi"}', "/v1/completions")
    r = LLMRequest.from_parsed(parsed, {"x-gateway-inference-objective": "throughput"})
    assert r.profile == "throughput"
    assert scheduler(_pool()).schedule(r).profile == "throughput"


def test_unknown_header_profile_falls_back_instead_of_failing() -> None:
    cfg = Scheduling(model_profiles={"batch-model": "throughput"})
    s = scheduler(_pool(), cfg)
    assert s.schedule(req(profile="no-such-profile")).profile == "latency"
    assert s.schedule(req(profile="no-such-profile", model="batch-model")).profile == "throughput"


def test_profile_by_model_then_default() -> None:
    cfg = Scheduling(default_profile="latency", model_profiles={"batch-model": "throughput"})
    s = scheduler(_pool(), cfg)
    assert s.schedule(req(model="batch-model")).profile == "throughput"
    assert s.schedule(req(model="batch-model", profile="latency")).profile == "latency"
    assert s.schedule(req()).profile == "latency"


def test_config_overrides_builtin_weights_one_by_one() -> None:
    cfg = Scheduling(profiles={"latency": Profile(weights={"prefix": 0.0, "kv_cache": 9.0})})
    s = scheduler(_pool(), cfg)
    scores = s.schedule(req()).scores
    assert "prefix" not in scores  # weight 0 disables the scorer
    assert {"kv_cache", "queue", "inflight"} <= set(scores)


def test_new_profile_from_config_with_its_own_picker_and_filters() -> None:
    cfg = Scheduling(
        profiles={"rr": Profile(weights={}, filters=["model"], picker="round_robin", sheddable=True)}
    )
    s = scheduler(_pool(), cfg)
    assert "rr" in s.profile_names() and "latency" in s.profile_names()
    picks = [s.schedule(req(profile="rr")) for _ in range(4)]
    assert [p.pod.name for p in picks] == ["a", "b", "a", "b"]
    assert all(p.sheddable for p in picks)


def test_sheddable_header_marks_the_request() -> None:
    parsed = parse_request(b'{"model": "llama-8b", "prompt": "hi"}', "/v1/completions")
    r = LLMRequest.from_parsed(parsed, {"x-fleetgate-sheddable": "true", "x-request-id": "r-1"})
    assert r.sheddable and r.request_id == "r-1"
    assert scheduler(_pool()).schedule(r).sheddable


@pytest.mark.parametrize(
    ("scheduling", "field"),
    [
        (
            {"profiles": {"fast": {"weights": {"queue": 1, "vibes": 2}}}},
            "scheduling.profiles.fast.weights.vibes",
        ),
        ({"profiles": {"fast": {"filters": ["model", "nope"]}}}, "scheduling.profiles.fast.filters[1]"),
        ({"profiles": {"fast": {"picker": "coin"}}}, "scheduling.profiles.fast.picker"),
        ({"defaultProfile": "missing"}, "scheduling.defaultProfile"),
        ({"modelProfiles": {"m": "missing"}}, "scheduling.modelProfiles.m"),
    ],
)
def test_bad_scheduling_config_names_the_field(scheduling: dict[str, object], field: str) -> None:
    spec = load_config_data(
        {"discovery": {"static": {"endpoints": ["http://127.0.0.1:9"]}}, "scheduling": scheduling},
        GatewaySpec,
    )
    with pytest.raises(ConfigError) as ei:
        scheduler(_pool(), spec.scheduling)
    assert f"`{field}`" in str(ei.value)


def test_unknown_scorer_error_lists_the_known_ones() -> None:
    with pytest.raises(
        ConfigError, match=r"unknown scheduling plugin 'vibes' \(known: .*kv_cache.*prefix.*queue"
    ):
        scheduler(_pool(), Scheduling(profiles={"x": Profile(weights={"vibes": 1.0})}))
