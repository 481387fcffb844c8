"""Large pools are decided over a sample (`scheduling.twoStage`): the filters and scorers see only
the sample, yet the pods whose score stands out (prefix holders and homes, adapter holders) are
always in it, and a verdict the sample cannot give (saturated, nothing usable) is the pool's."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import pytest

from cluster_gateway.pool import EndpointPool, PodMetrics, PodState
from cluster_gateway.scheduling import PluginBase, SchedulingContext, SchedulingHandle
from cluster_gateway.scheduling.plugin import PLUGINS, register_plugin
from common.config.gateway import PluginConfig, Profile, Scheduling, TwoStage
from common.errors import OpenAIError

from .podfactory import NOW, add_pod, dispatch, req, scheduler

PODS = 300
SAMPLE = 8
PROMPT = "You are a careful assistant. " * 40 + "Question: what is two-stage picking?"


class CountingFilter(PluginBase):
    """Test filter: records how many candidates each decision showed it, keeps them all."""

    seen: list[int] = []

    def __init__(self, name: str, params: Mapping[str, Any], handle: SchedulingHandle) -> None:
        super().__init__(name, params, handle)
        CountingFilter.seen = []

    def filter(self, ctx: SchedulingContext, pods: list[PodState]) -> list[PodState]:
        CountingFilter.seen.append(len(pods))
        return pods


def _cfg(profile: str = "latency", **kw: Any) -> Scheduling:
    return Scheduling(default_profile=profile, two_stage=TwoStage(min_pods=64, sample=SAMPLE), **kw)


def _pool(n: int = PODS, **kw: Any) -> EndpointPool:
    pool = EndpointPool()
    for i in range(n):
        add_pod(pool, f"pod-{i}", **kw)
    return pool


@pytest.fixture
def counting() -> Any:
    if "count_pods" not in PLUGINS:
        register_plugin("count_pods", CountingFilter)
    return CountingFilter


def test_filters_and_scorers_touch_only_the_sample(counting: Any) -> None:
    pool = _pool()
    cfg = _cfg(profiles={"latency": Profile(plugins=["count_pods"])})
    sched = scheduler(pool, cfg)
    for i in range(20):
        sched.schedule(req(f"prompt {i}"))
    assert counting.seen and max(counting.seen) <= SAMPLE + 8  # the sample plus a few nominations


def test_the_prefix_holder_is_always_scored() -> None:
    pool = _pool()
    sched = scheduler(pool, _cfg())
    first = dispatch(pool, sched, req(PROMPT))
    pool.release(first)
    # 40 more decisions of the same long prompt: a random sample of 8 in 300 would miss the holder
    # almost every time; nominated, it wins every time (it is idle and holds the whole prefix)
    for _ in range(40):
        res = sched.schedule(req(PROMPT))
        assert res.pod.name == first


def test_the_pod_holding_the_adapter_is_always_scored() -> None:
    pool = EndpointPool()
    for i in range(PODS):
        running = ["lora-a"] if i == 211 else []
        others = [f"lora-{k}" for k in range(4)]
        add_pod(
            pool, f"pod-{i}", adapters=["lora-a", *others], running_adapters=running or others, max_lora=4
        )
    sched = scheduler(pool, _cfg())
    for k in range(20):
        assert sched.schedule(req(f"adapter prompt {k}", model="lora-a")).pod.name == "pod-211"


def test_a_model_on_few_pods_is_decided_over_those_pods(counting: Any) -> None:
    pool = _pool()
    for i in range(12):
        add_pod(pool, f"other-{i}", models=["mistral-7b"])
    sched = scheduler(pool, _cfg(profiles={"latency": Profile(plugins=["count_pods"])}))
    for k in range(10):
        assert sched.schedule(req(f"p{k}", model="mistral-7b")).pod.name.startswith("other-")
    assert counting.seen[-1] == 12
    with pytest.raises(OpenAIError) as err:
        sched.schedule(req("p", model="no-such-model"))
    assert err.value.status == 404


def test_saturation_is_the_pools_verdict_not_the_samples() -> None:
    pool = _pool(waiting=9)  # every pod over the queue threshold (5)...
    pool.record_scrape("pod-123", PodMetrics(engine="vllm", waiting=0, kv_usage=0.1, scraped_at=NOW))
    sched = scheduler(pool, _cfg())
    for k in range(10):
        res = sched.schedule(req(f"p{k}"))
        assert res.pod.name == "pod-123" and not res.saturated  # ...but one: the whole pool finds it
    pool.record_scrape("pod-123", PodMetrics(engine="vllm", waiting=9, kv_usage=0.1, scraped_at=NOW))
    assert sched.schedule(req("p")).saturated


def test_round_robin_still_rotates_over_every_pod() -> None:
    pool = _pool()
    sched = scheduler(pool, _cfg("round-robin"))
    names = [dispatch(pool, sched, req("x")) for _ in range(PODS)]
    assert len(set(names)) == PODS


def test_pool_size_at_or_below_min_pods_is_decided_whole(counting: Any) -> None:
    pool = _pool(64)
    sched = scheduler(pool, _cfg(profiles={"latency": Profile(plugins=["count_pods"])}))
    sched.schedule(req("p"))
    assert counting.seen == [64]


def test_two_stage_off_decides_over_every_pod(counting: Any) -> None:
    pool = _pool()
    cfg = Scheduling(
        two_stage=TwoStage(min_pods=0),
        plugins=[PluginConfig(type="count_pods")],
        profiles={"latency": Profile(plugins=["count_pods"])},
    )
    scheduler(pool, cfg).schedule(req("p"))
    assert counting.seen == [PODS]


def test_adapter_placement_checks_a_large_pool_a_chunk_at_a_time() -> None:
    from cluster_gateway.scheduling.adapter_memory import AdapterPlacement

    pool = EndpointPool()
    for i in range(5):
        add_pod(pool, f"pod-{i}", running_adapters=["lora-a"] if i == 4 else [], max_lora=2)
    placement = AdapterPlacement(ttl_s=1.0, chunk=2)
    pods = pool.pods()
    found = [placement.pods_with("lora-a", pods, now=10.0 + 2 * k) for k in range(3)]
    assert found == [[], [], ["pod-4"]]  # pods 0-1, then 2-3, then 4 (and 0 again)
    assert placement.pods_with("lora-a", pods, now=14.5) == ["pod-4"]  # within the TTL: no check
    pool.record_scrape("pod-4", PodMetrics(engine="vllm", max_lora=2, scraped_at=NOW))  # adapter gone
    for k in range(3):
        placement.pods_with("lora-a", pool.pods(), now=20.0 + 2 * k)
    assert placement.pods_with("lora-a", pool.pods(), now=30.0) == []
