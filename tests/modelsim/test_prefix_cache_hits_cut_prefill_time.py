"""A prompt whose prefix is already in the KV cache skips that part of prefill."""

from __future__ import annotations

import httpx

from modelsim.fleet import PodSpec, SimFleet
from tests.modelsim.simclient import distinct_prompt, metric, stream_completion


async def test_repeated_prefix_hits_cache_and_cuts_ttft() -> None:
    # Small prefill chunks and a 3x time scale make an 800-token prefill ~13 steps long.
    spec = PodSpec(profile="tiny", max_num_batched_tokens=64, time_scale=3.0)
    async with SimFleet([spec]) as fleet, httpx.AsyncClient(base_url=fleet.urls[0], timeout=30) as c:
        await stream_completion(c, "warm up the connection", 1)
        shared = distinct_prompt(1, 800)
        cold = await stream_completion(c, shared + " first question?", 4)
        warm = await stream_completion(c, shared + " second question, longer?", 4)
        other = await stream_completion(c, distinct_prompt(2, 800) + " first question?", 4)
        body = (await c.get("/metrics")).text

    assert cold.usage is not None and warm.usage is not None and other.usage is not None
    assert cold.usage["prompt_tokens_details"] == {"cached_tokens": 0}
    assert warm.usage["prompt_tokens_details"] == {"cached_tokens": 800}  # 50 full blocks
    assert other.usage["prompt_tokens_details"] == {"cached_tokens": 0}
    assert warm.ttft < cold.ttft / 3
    assert other.ttft > 3 * warm.ttft
    hits = metric(body, "vllm:prefix_cache_hits_total")
    queries = metric(body, "vllm:prefix_cache_queries_total")
    assert hits == 800
    assert queries >= 3 * 800


async def test_eviction_takes_the_unreferenced_tail_blocks_first() -> None:
    # 64 blocks: a (38 blocks) then b (38 blocks) do not both fit, so b evicts 11 of a's blocks,
    # tail first (as vLLM frees them), leaving a's first 26 blocks reusable.
    async with SimFleet([PodSpec(profile="tiny")]) as fleet, httpx.AsyncClient(base_url=fleet.urls[0]) as c:
        a, b = distinct_prompt(10, 600), distinct_prompt(11, 600)
        await stream_completion(c, a, 1)
        await stream_completion(c, b, 1)  # evicts part of a's blocks
        again_b = await stream_completion(c, b, 1)
        again_a = await stream_completion(c, a, 1)
        kv = fleet.pods[0].engine.kv
    assert again_b.usage is not None and again_a.usage is not None
    assert again_b.usage["prompt_tokens_details"] == {"cached_tokens": 592}  # all full blocks but the last
    assert again_a.usage["prompt_tokens_details"] == {"cached_tokens": 26 * 16}
    assert kv.evictions > 0


async def test_reset_prefix_cache_forgets_unreferenced_blocks() -> None:
    async with SimFleet([PodSpec(profile="tiny")]) as fleet, httpx.AsyncClient(base_url=fleet.urls[0]) as c:
        p = distinct_prompt(3, 200)
        await stream_completion(c, p, 1)
        assert (await c.post("/reset_prefix_cache")).status_code == 200
        again = await stream_completion(c, p, 1)
    assert again.usage is not None and again.usage["prompt_tokens_details"] == {"cached_tokens": 0}
