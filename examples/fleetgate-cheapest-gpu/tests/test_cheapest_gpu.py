"""The example plugin on its own: prices from params rank the pods, bad params are refused."""

from __future__ import annotations

import random

import pytest
from fleetgate_cheapest_gpu import CheapestGpuScorer

from cluster_gateway.pool import Endpoint, EndpointPool
from cluster_gateway.scheduling import LLMRequest, Scheduler
from common.config import ConfigError
from common.config.gateway import PluginConfig, Profile, Scheduling


def _pool() -> EndpointPool:
    pool = EndpointPool()
    for i, gpu in enumerate(["h100", "l4", "a10g"]):
        pool.upsert(Endpoint(f"pod-{gpu}", f"127.0.0.{i + 1}", 8000, "vllm", {"fleetgate.io/gpu": gpu}))
    pool.upsert(Endpoint("pod-unlabelled", "127.0.0.9", 8000, "vllm"))
    return pool


def _scheduler(params: dict[str, object]) -> Scheduler:
    cfg = Scheduling(
        default_profile="cheap",
        plugins=[PluginConfig(type="cheapest_gpu", name="gpu_cost", weight=10.0, params=params)],
        profiles={"cheap": Profile(weights={"inflight": 1.0}, plugins=["gpu_cost"], filters=["healthy"])},
    )
    return Scheduler(_pool(), cfg, rng=random.Random(1))


def _req() -> LLMRequest:
    return LLMRequest(model="m", prompt_text="hi", max_tokens=4, stream=False, profile=None)


def test_the_cheapest_gpu_wins_and_unlisted_ones_cost_the_most() -> None:
    s = _scheduler({"prices": {"h100": 4.0, "l4": 0.8, "a10g": 1.0}})
    res = s.schedule(_req())
    assert [p.name for p in res.pods[:2]] == ["pod-l4", "pod-a10g"]
    assert {p.name for p in res.pods[2:]} == {"pod-h100", "pod-unlabelled"}  # 4.0 each: listed and unknown
    assert res.scores["gpu_cost"] == 1.0
    plugin = s.plugin("gpu_cost")
    assert isinstance(plugin, CheapestGpuScorer) and plugin.unknown_price == 4.0


def test_another_price_list_moves_the_traffic() -> None:
    assert _scheduler({"prices": {"h100": 0.5, "l4": 0.8}}).schedule(_req()).pod.name == "pod-h100"


@pytest.mark.parametrize("params", [{}, {"prices": {"h100": 0}}, {"prices": {"h100": "cheap"}}])
def test_bad_params_are_a_config_error(params: dict[str, object]) -> None:
    with pytest.raises(ConfigError, match="cheapest_gpu"):
        _scheduler(params)
