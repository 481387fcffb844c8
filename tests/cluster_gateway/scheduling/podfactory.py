"""Hand-built pools for scheduling tests: pods with exactly the metrics a test needs."""

from __future__ import annotations

import random
from collections.abc import Iterable
from typing import Any

from cluster_gateway.pool import Endpoint, EndpointPool, EngineType, PodMetrics, PodState
from cluster_gateway.scheduling import LLMRequest, Scheduler, SchedulingHandle
from cluster_gateway.scheduling.registry import PluginSet
from common.config.gateway import PluginConfig, Scheduling

NOW = 1000.0
MODEL = "llama-8b"


class Clock:
    def __init__(self, t: float = NOW) -> None:
        self.t = t

    def __call__(self) -> float:
        return self.t


def add_pod(
    pool: EndpointPool,
    name: str,
    *,
    waiting: int = 0,
    running: int = 0,
    kv: float | None = 0.1,
    engine: EngineType = "vllm",
    models: Iterable[str] = (MODEL,),
    adapters: Iterable[str] | None = None,
    running_adapters: Iterable[str] = (),
    waiting_adapters: Iterable[str] = (),
    max_lora: int = 0,
    age: float = 0.0,
    now: float = NOW,
    scraped: bool = True,
    inflight: int = 0,
    dispatched: int = 0,
    failures: int = 0,
    stale: bool | None = None,
    num_gpu_blocks: int | None = None,
    block_size: int | None = None,
    annotations: dict[str, str] | None = None,
) -> PodState:
    idx = len(pool) + 1
    pool.upsert(
        Endpoint(name=name, address=f"127.0.0.{idx}", port=8000, engine=engine, annotations=annotations or {})
    )
    pod = pool.get(name)
    assert pod is not None
    if scraped:
        pool.record_scrape(
            name,
            PodMetrics(
                engine=engine,
                waiting=waiting,
                running=running,
                kv_usage=kv,
                running_adapters=frozenset(running_adapters),
                waiting_adapters=frozenset(waiting_adapters),
                max_lora=max_lora,
                num_gpu_blocks=num_gpu_blocks,
                block_size=block_size,
                scraped_at=now - age,
            ),
        )
    if adapters is None:
        pool.set_models(name, models)  # no parent info, like a list without `parent` keys
    else:  # the pod's exact catalog: `models` are its base models, `adapters` sit on the first
        bases = list(models)
        pool.set_catalog(name, bases, dict.fromkeys(adapters, bases[0] if bases else MODEL))
    pod.inflight = inflight
    pod.dispatched_since_scrape = dispatched
    pod.consecutive_failures = failures
    if stale is not None:
        pod.stale = stale
    return pod


def get(pool: EndpointPool, name: str) -> PodState:
    pod = pool.get(name)
    assert pod is not None
    return pod


def scheduler(
    pool: EndpointPool, cfg: Scheduling | None = None, *, seed: int = 7, clock: Clock | None = None
) -> Scheduler:
    return Scheduler(pool, cfg or Scheduling(), rng=random.Random(seed), clock=clock or Clock())


def req(
    prompt: str = "hello there",
    *,
    model: str = MODEL,
    profile: str | None = None,
    max_tokens: int | None = 64,
) -> LLMRequest:
    return LLMRequest(model=model, prompt_text=prompt, max_tokens=max_tokens, stream=False, profile=profile)


def dispatch(pool: EndpointPool, sched: Scheduler, r: LLMRequest) -> str:
    """Pick and dispatch like the proxy does: schedule, acquire, on_dispatch."""
    res = sched.schedule(r)
    pool.acquire(res.pod.name)
    sched.on_dispatch(r, res.pod)
    return res.pod.name


def plugin(
    type_name: str,
    pool: EndpointPool | None = None,
    *,
    params: dict[str, Any] | None = None,
    seed: int = 1,
    clock: Clock | None = None,
) -> Any:
    """One plugin built the way a scheduler builds it (`factory(name, params, handle)`), told the pool."""
    pool = pool if pool is not None else EndpointPool()
    cfg = Scheduling(plugins=[PluginConfig(type=type_name, params=params or {})])
    handle = SchedulingHandle(pool, cfg, clock or Clock(), random.Random(seed), 3)
    built = PluginSet(cfg, handle)
    wanted = built.get(type_name, "test")
    for p in built.seal():
        hook = getattr(p, "on_pods_changed", None)
        if hook is not None:
            hook(pool.pods())
    return wanted
