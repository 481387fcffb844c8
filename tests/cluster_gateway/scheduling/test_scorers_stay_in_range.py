"""Every registered scorer rates every candidate within [0, 1], whatever the pool looks like."""

from __future__ import annotations

import random

import pytest

from cluster_gateway.pool import EndpointPool
from cluster_gateway.scheduling import registry
from cluster_gateway.scheduling.profiles import BUILTIN_PROFILES
from cluster_gateway.scheduling.types import SchedulingContext
from common.plugins import has_hook

from .podfactory import MODEL, NOW, add_pod, plugin, req

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


SCORERS = sorted(t for t in registry.BUILTIN if has_hook(plugin(t), "score"))


@pytest.mark.parametrize("seed", range(5))
@pytest.mark.parametrize("scorer_name", SCORERS)
def test_scores_are_within_unit_range(scorer_name: str, seed: int) -> None:
    rng = random.Random(seed)
    pool = _random_pool(rng, rng.randint(1, 40))
    scorer = plugin(scorer_name, pool)
    pods = pool.pods()
    text = "shared prefix " * 100
    for p in rng.sample(pods, min(3, len(pods))):
        # what a dispatch teaches the plugins (the prefix index, the adapter memory)
        for hook in (
            getattr(scorer, "on_dispatch", None),
            getattr(getattr(scorer, "_index", None), "on_dispatch", None),
        ):
            if hook is not None:
                hook(req(text[: rng.randint(64, len(text))], model=rng.choice([MODEL, *ADAPTERS])), p)
    r = req(text + "tail", model=rng.choice([MODEL, *ADAPTERS]))
    ctx = SchedulingContext(
        request=r, profile=BUILTIN_PROFILES["latency"], now=NOW, staleness_s=0.2, dead_after_failures=3
    )
    scores = scorer.score(ctx, pods)
    assert len(scores) == len(pods)
    assert all(-1e-9 <= s <= 1.0 + 1e-9 for s in scores), scores


def test_every_builtin_scorer_is_covered() -> None:
    assert len(SCORERS) == 12 and {"prefix", "precise_prefix", "lora", "prefill"} <= set(SCORERS)
