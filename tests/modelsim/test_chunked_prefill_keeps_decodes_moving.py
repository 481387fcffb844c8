"""Chunked prefill: a long prompt is split by the step token budget and running decodes keep
getting one token every step meanwhile (vLLM's max_num_batched_tokens behaviour)."""

from __future__ import annotations

import asyncio

from modelsim.engine import Engine
from modelsim.profiles import get_profile
from tests.eventually import eventually


async def test_long_prefill_is_chunked_and_decodes_continue() -> None:
    eng = Engine(get_profile("tiny"), "m")  # budget 256 tokens a step
    eng.start()
    try:
        short = eng.submit("s" * 40, 200, None)
        await eventually(lambda: short.num_output >= 3, within=10.0, interval=0.001)
        steps0, out0 = eng.stats.steps_total, short.num_output
        long = eng.submit("L" * 3600, 5, None)  # 900 tokens -> 4 chunks
        await eventually(lambda: long.num_output >= 1, within=10.0, interval=0.001)
        steps = eng.stats.steps_total - steps0
        assert 4 <= steps <= 6  # 4 chunks, maybe the step that was already in flight
        assert short.num_output - out0 >= steps - 1  # one decode token every step
        hist = eng.stats.iteration_tokens
        assert sum(hist.counts[hist.bounds.index(256.0) + 1 :]) == 0  # no step above the budget
        assert sum(hist.counts[hist.bounds.index(128.0) + 1 :]) >= 3  # the full chunks
        await asyncio.wait_for(long.wait_finished(), 5)
    finally:
        await eng.stop()
