"""Queueing behind max_num_seqs and waiting for KV blocks both show up in time-to-first-token."""

from __future__ import annotations

import asyncio

import httpx

from modelsim.fleet import PodSpec, SimFleet
from tests.modelsim.simclient import distinct_prompt, stream_completion


async def test_ttft_rises_when_requests_queue_behind_max_num_seqs() -> None:
    fleet = SimFleet([PodSpec(profile="tiny", max_num_seqs=4)])
    async with fleet, httpx.AsyncClient(base_url=fleet.urls[0], timeout=30) as c:
        alone = await stream_completion(c, distinct_prompt(0, 20), 30)
        burst = await asyncio.gather(*(stream_completion(c, distinct_prompt(i, 20), 30) for i in range(12)))
    ttfts = sorted(t.ttft for t in burst)
    # 12 requests, 4 slots: the last four wait for two full generations (~2 x 30 steps).
    assert ttfts[-1] > 5 * alone.ttft
    assert ttfts[-1] > 0.15
    assert ttfts[0] < 0.5 * ttfts[-1]


async def test_ttft_rises_when_kv_cache_is_saturated() -> None:
    # Same prompts, same batch limits; only the KV pool differs (1024 vs 8192 tokens).
    specs = [PodSpec(profile="tiny"), PodSpec(profile="tiny", kv_capacity_tokens=8192)]
    async with SimFleet(specs) as fleet:
        results = []
        for url in fleet.urls:
            async with httpx.AsyncClient(base_url=url, timeout=30) as c:
                rs = await asyncio.gather(
                    *(stream_completion(c, distinct_prompt(i, 400), 40) for i in range(4))
                )
                results.append(max(r.ttft for r in rs))
        small = fleet.pods[0].engine.stats
    saturated, roomy = results
    # 4 x (400 prompt + 40 output) tokens do not fit in 1024: two requests wait a whole generation.
    assert saturated > 2 * roomy
    assert saturated > 0.15
    assert small.success_by_reason["length"] == 4
