"""SSE chunks leave as tokens are generated, not in one burst at the end."""

from __future__ import annotations

import httpx

from modelsim.fleet import PodSpec, SimFleet
from tests.modelsim.simclient import stream_completion


async def test_chunks_arrive_spread_over_the_generation() -> None:
    async with SimFleet([PodSpec(profile="tiny")]) as fleet, httpx.AsyncClient(base_url=fleet.urls[0]) as c:
        t = await stream_completion(c, "tell me a story", 40)
    assert t.usage is not None and t.usage["completion_tokens"] == 40
    assert len(t.chunk_times) >= 20  # deltas may merge only when the client lags
    # ~40 decode steps of ~5 ms: the first chunk comes long before the last
    assert t.total > 0.12
    assert t.ttft < t.total / 4
    gaps = [b - a for a, b in zip(t.chunk_times, t.chunk_times[1:], strict=False)]
    assert max(gaps) < t.total / 3
    halfway = t.start + t.total / 2
    assert sum(1 for x in t.chunk_times if x < halfway) >= len(t.chunk_times) // 4


async def test_time_scale_slows_everything_uniformly() -> None:
    specs = [PodSpec(profile="tiny"), PodSpec(profile="tiny", time_scale=3.0)]
    async with SimFleet(specs) as fleet:
        totals = []
        for url in fleet.urls:
            async with httpx.AsyncClient(base_url=url) as c:
                totals.append((await stream_completion(c, "tell me a story", 30)).total)
    assert totals[1] > 2 * totals[0]
