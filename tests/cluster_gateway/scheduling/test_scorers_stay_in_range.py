"""Every registered scorer rates every candidate within [0, 1], whatever the pool looks like."""

from __future__ import annotations

import random

import pytest

from cluster_gateway.pool import EndpointPool
from cluster_gateway.scheduling import registry
from cluster_gateway.scheduling.adapter_memory import AdapterMemory
from cluster_gateway.scheduling.prefix_index import PrefixIndex
from cluster_gateway.scheduling.profiles import BUILTIN_PROFILES
from cluster_gateway.scheduling.types import SchedulingContext

from .podfactory import MODEL, NOW, add_pod, req

ADAPTERS = ["a1", "a2", "a3"]


def _random_pool(rng: random.Random, n: int) -> EndpointPool:
    pool = EndpointPool()
    for i in range(n):
        engine = rng.choice(["vllm", "vllm", "sglang", "tgi"])
        add_pod(
            pool,
            f"p{i}",
            engine=engine,  # type: ignore[arg-type]
            waiting=rng.randint(0, 30),
            running=rng.randint(0, 300),
            kv=None if engine == "tgi" else rng.random(),
            models=(MODEL, *ADAPTERS),
            running_adapters=set(rng.sample(ADAPTERS, rng.randint(0, 2))),
            waiting_adapters=set(rng.sample(ADAPTERS, rng.randint(0, 1))),
            max_lora=0 if engine == "tgi" else 2,
            inflight=rng.randint(0, 50),
            dispatched=rng.randint(0, 40),
            num_gpu_blocks=rng.choice([None, 100, 5000]),
            block_size=16,
            scraped=rng.random() > 0.1,
        )
    return pool


@pytest.mark.parametrize("seed", range(5))
@pytest.mark.parametrize("scorer_name", sorted(registry.SCORERS))
def test_scores_are_within_unit_range(scorer_name: str, seed: int) -> None:
    rng = random.Random(seed)
    pool = _random_pool(rng, rng.randint(1, 40))
    index = PrefixIndex(1000)
    pods = pool.pods()
    text = "shared prefix " * 100
    for p in rng.sample(pods, min(3, len(pods))):
        index.add(p.name, req(text[: rng.randint(64, len(text))]).block_hashes(64, 256))
    r = req(text + "tail", model=rng.choice([MODEL, *ADAPTERS]))
    ctx = SchedulingContext(
        request=r,
        profile=BUILTIN_PROFILES["latency"],
        now=NOW,
        staleness_s=0.2,
        dead_after_failures=3,
        prefix_index=index,
        block_chars=64,
        max_prefix_blocks=256,
        adapters=AdapterMemory(),
    )
    scores = registry.SCORERS[scorer_name]().score(ctx, pods)
    assert len(scores) == len(pods)
    assert all(-1e-9 <= s <= 1.0 + 1e-9 for s in scores), scores
