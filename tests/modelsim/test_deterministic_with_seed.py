"""Same seed, same request sequence: same output lengths and text; another seed differs."""

from __future__ import annotations

import httpx

from common.tokens import count_tokens
from modelsim.fleet import PodSpec, SimFleet
from tests.modelsim.conftest import MODEL


async def _run(seed: int) -> list[tuple[str, str, int]]:
    fleet = SimFleet([PodSpec(profile="tiny", seed=seed)])
    out = []
    async with fleet, httpx.AsyncClient(base_url=fleet.urls[0]) as c:
        for i in range(6):
            r = await c.post("/v1/completions", json={"model": MODEL, "prompt": f"question {i}"})
            body = r.json()
            ch = body["choices"][0]
            assert count_tokens(ch["text"]) == body["usage"]["completion_tokens"]
            out.append((ch["text"], ch["finish_reason"], body["usage"]["completion_tokens"]))
    return out


async def test_seeded_runs_repeat_and_differ_across_seeds() -> None:
    a, b, c = await _run(7), await _run(7), await _run(8)
    assert a == b
    assert a != c
    assert {r[1] for r in a} == {"stop"}  # no max_tokens: the sampled length ends it, like EOS
    assert len({r[2] for r in a}) > 1
