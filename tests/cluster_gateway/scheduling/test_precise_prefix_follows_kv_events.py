"""KV-event prefix routing against the simulator's real ZMQ events: a request lands on the pod that
really holds its prefix, even after the approximate index was misled."""

from __future__ import annotations

import random
from collections.abc import AsyncIterator

import pytest

from cluster_gateway.pool import Endpoint, EndpointPool, PodMetrics
from cluster_gateway.scheduling import LLMRequest, Scheduler
from cluster_gateway.scheduling.precise.index import TRUSTED
from cluster_gateway.scheduling.precise.plugin import (
    ENDPOINT_ANNOTATION,
    REPLAY_ANNOTATION,
    PrecisePrefixScorer,
)
from common.config.gateway import PluginConfig, Profile, Scheduling
from common.kv_block_hash import BlockHasher, sim_token_ids
from modelsim.fleet import PodSpec, SimFleet
from modelsim.kv_events import KVEventsConfig
from tests.eventually import eventually

from .podfactory import Clock

MODEL = "llama-8b"
PREFIX = "".join(f"[system rule {i:03d}: answer briefly and cite the manual] " for i in range(32))[
    :1280
]  # 20 blocks


@pytest.fixture
async def fleet() -> AsyncIterator[SimFleet]:
    cfg = KVEventsConfig(endpoint="tcp://127.0.0.1:0", replay_endpoint="tcp://127.0.0.1:0")
    specs = [PodSpec(profile="tiny", model=MODEL, seed=i, kv_events=cfg) for i in range(2)]
    f = SimFleet(specs)
    await f.start()
    try:
        yield f
    finally:
        await f.stop()


def _scrape(pool: EndpointPool, clock: Clock) -> None:
    """A fresh scrape of every pod: idle, KV mostly free."""
    for pod in pool.pods():
        pool.record_scrape(
            pod.name, PodMetrics(engine="vllm", waiting=0, running=0, kv_usage=0.1, scraped_at=clock())
        )


def _pool(fleet: SimFleet, clock: Clock) -> EndpointPool:
    pool = EndpointPool()
    for name, pod in zip(("a", "b"), fleet.pods, strict=True):
        assert pod.kv_events is not None
        ann = {ENDPOINT_ANNOTATION: pod.kv_events.endpoint}
        if pod.kv_events.replay_endpoint:
            ann[REPLAY_ANNOTATION] = pod.kv_events.replay_endpoint
        pool.upsert(Endpoint(name=name, address="127.0.0.1", port=pod.port, engine="vllm", annotations=ann))
        pool.set_models(name, [MODEL])
    _scrape(pool, clock)
    return pool


def _scheduler(pool: EndpointPool, clock: Clock) -> Scheduler:
    cfg = Scheduling(
        plugins=[PluginConfig(type="precise_prefix", params={"pendingTtlS": 2.0})],
        profiles={
            "precise": Profile(weights={"precise_prefix": 3.0, "queue": 1.0}),
            "approximate": Profile(weights={"prefix": 3.0, "queue": 1.0}),
        },
        default_profile="precise",
    )
    return Scheduler(pool, cfg, rng=random.Random(3), clock=clock)


async def _serve(fleet: SimFleet, i: int, prompt: str) -> None:
    r = fleet.pods[i].engine.submit(prompt, 1, None)
    await r.wait_finished()


def _req(prompt: str, profile: str | None = None) -> LLMRequest:
    return LLMRequest(model=MODEL, prompt_text=prompt, max_tokens=8, stream=False, profile=profile)


async def test_request_lands_where_the_prefix_really_is_after_the_approximate_index_was_misled(
    fleet: SimFleet,
) -> None:
    clock = Clock()
    pool = _pool(fleet, clock)
    sched = _scheduler(pool, clock)
    sched.schedule(_req("hello"))  # the first decision subscribes to both pods' streams
    scorer = sched.plugin("precise_prefix")
    assert isinstance(scorer, PrecisePrefixScorer)
    assert set(scorer.states()) == {"a", "b"}

    # The gateway once sent the prefix to pod a: the approximate index now believes a holds it.
    pod_a = pool.get("a")
    assert pod_a is not None
    sched.on_dispatch(_req(PREFIX + "user: q1"), pod_a)
    # ...and a really computed it, then evicted it under other prompts (tiny pod: 64 KV blocks).
    await _serve(fleet, 0, PREFIX + "user: q1")
    for n in range(3):
        await _serve(fleet, 0, f"unrelated document {n}: " + "lorem ipsum dolor sit amet " * 130)
    # Meanwhile pod b served the prefix (say, another gateway replica sent it there).
    await _serve(fleet, 1, PREFIX + "user: q2")

    hashes = BlockHasher(16, "0").hashes(sim_token_ids(PREFIX))
    cache_a, cache_b = scorer.caches["a"], scorer.caches["b"]
    await eventually(
        lambda: (
            cache_b.matched(hashes) == len(hashes) and cache_a.matched(hashes) == 0 and cache_a.batches >= 2
        ),
        within=10,
        what="pod b's BlockStored and pod a's BlockRemoved events reached the gateway",
    )
    assert fleet.pods[0].engine.kv.evictions > 0
    assert scorer.states() == {"a": TRUSTED, "b": TRUSTED}

    clock.t += 5.0  # the dispatch to a is no longer "just sent" (pendingTtlS)
    _scrape(pool, clock)
    misled = sched.schedule(_req(PREFIX + "user: q3", "approximate"))
    assert misled.pod.name == "a", misled
    res = sched.schedule(_req(PREFIX + "user: q3"))
    assert res.pod.name == "b"
    assert res.scores["precise_prefix"] > 0.9
    await scorer.close()


async def test_a_pod_without_an_event_stream_is_scored_by_the_approximate_index(fleet: SimFleet) -> None:
    clock = Clock()
    pool = _pool(fleet, clock)
    pool.upsert(Endpoint(name="c", address="127.0.0.1", port=1, engine="vllm"))  # publishes nothing
    pool.set_models("c", [MODEL])
    _scrape(pool, clock)
    sched = _scheduler(pool, clock)
    sched.schedule(_req("hello"))
    pod_c = pool.get("c")
    assert pod_c is not None
    sched.on_dispatch(_req(PREFIX + "user: q1"), pod_c)
    scorer = sched.plugin("precise_prefix")
    assert isinstance(scorer, PrecisePrefixScorer)
    assert "c" not in scorer.states()
    clock.t += 5.0
    _scrape(pool, clock)
    res = sched.schedule(_req(PREFIX + "user: q2"))
    assert res.pod.name == "c"
    assert res.scores["precise_prefix"] > 0.9
    await scorer.close()
