"""KV block accounting, prefix sharing, and recompute preemption when decode growth overflows."""

from __future__ import annotations

import asyncio

from modelsim.engine import Engine
from modelsim.kv_cache import KVCache, prompt_block_hashes
from modelsim.profiles import get_profile, with_overrides
from modelsim.request import SimRequest


def _req(text: str, lora: str | None = None) -> SimRequest:
    return SimRequest(rid="r", prompt_tokens=len(text) // 4, block_hashes=prompt_block_hashes(text, 16, 4, lora),
                      max_output=1, finish_on_limit="length", lora=lora, arrival=0.0)  # fmt: skip


def test_shared_prefix_blocks_are_refcounted_and_freed_to_lru() -> None:
    kv = KVCache(num_blocks=10, block_size=16)
    text = "a" * 64 * 4  # 4 full blocks
    r1, r2 = _req(text), _req(text)
    assert kv.admit(r1, 0, 64)
    assert kv.num_used == 4
    hits = kv.count_hits(r2.block_hashes, 3)
    assert hits == 3
    assert kv.admit(r2, hits, 64)  # shares 4 blocks (the 4th computed by r1 meanwhile)
    assert kv.num_used == 4
    kv.free(r1)
    assert kv.num_used == 4  # r2 still holds them
    kv.free(r2)
    assert kv.num_used == 0 and kv.num_cached == 4  # free, but still hit-able
    assert kv.count_hits(_req(text).block_hashes, 4) == 4
    assert kv.count_hits(_req(text, lora="x").block_hashes, 4) == 0  # adapter is part of the hash


def test_allocation_is_all_or_nothing() -> None:
    kv = KVCache(num_blocks=4, block_size=16)
    r = _req("b" * 400)
    assert not kv.admit(r, 0, 100)  # needs 7 blocks
    assert kv.num_free == 4 and r.blocks == []


async def test_decode_growth_preempts_the_newest_and_both_still_finish() -> None:
    profile = with_overrides(get_profile("tiny"), kv_capacity_tokens=160)  # 10 blocks
    eng = Engine(profile, "m")
    eng.start()
    try:
        # each: 48-token prompt (3 blocks) + 60 output -> 7 blocks at the end; both fit at first
        r1 = eng.submit("p" * 192, 60, None)
        r2 = eng.submit("q" * 192, 60, None)
        await asyncio.wait_for(asyncio.gather(r1.wait_finished(), r2.wait_finished()), 10)
    finally:
        await eng.stop()
    assert (r1.num_output, r2.num_output) == (60, 60)
    assert r1.preemptions == 0 and r2.preemptions >= 1  # the newest gives way
    assert eng.stats.preemptions_total == r2.preemptions
    assert eng.kv.num_used == 0
    assert r2.finished_at is not None and r1.finished_at is not None and r2.finished_at > r1.finished_at


async def test_output_lengths_are_seeded() -> None:
    def lengths(seed: int) -> list[int]:
        eng = Engine(get_profile("tiny"), "m", seed=seed)
        return [eng.submit("x", None, None).max_output for _ in range(20)]

    a, b, c = lengths(1), lengths(1), lengths(2)
    assert a == b and a != c
    assert all(1 <= n <= 64 for n in a)
    assert len(set(a)) > 5
