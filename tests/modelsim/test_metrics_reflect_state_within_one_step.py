"""/metrics follows the engine within one step, in vLLM, SGLang and TGI names."""

from __future__ import annotations

import asyncio

import httpx
import pytest

from modelsim.engine import Engine
from modelsim.fleet import PodSpec, SimFleet
from tests.eventually import eventually
from tests.modelsim.conftest import MODEL
from tests.modelsim.simclient import distinct_prompt, metric


async def _after_steps(engine: Engine, n: int) -> None:
    target = engine.stats.steps_total + n
    await eventually(lambda: engine.stats.steps_total >= target, within=10.0, interval=0.001)


async def _post(c: httpx.AsyncClient, i: int) -> None:
    await c.post(
        "/v1/completions", json={"model": MODEL, "prompt": distinct_prompt(i, 30), "max_tokens": 300}
    )


async def test_gauges_track_admission_and_client_disconnects() -> None:
    async with SimFleet([PodSpec(profile="tiny")]) as fleet, httpx.AsyncClient(base_url=fleet.urls[0]) as c:
        eng = fleet.pods[0].engine
        tasks = [asyncio.create_task(_post(c, i)) for i in range(12)]
        await eventually(lambda: len(eng.running) + len(eng.waiting) == 12, within=10.0, interval=0.001)
        await _after_steps(eng, 1)
        body = (await c.get("/metrics")).text
        assert metric(body, "vllm:num_requests_running", model_name=MODEL) == 8  # tiny: max_num_seqs 8
        assert metric(body, "vllm:num_requests_waiting", model_name=MODEL) == 4
        kv = metric(body, "vllm:kv_cache_usage_perc")
        assert 8 * 2 / 64 <= kv <= 1.0  # 8 running x >= 2 blocks each
        assert metric(body, "vllm:gpu_cache_usage_perc") == kv

        for t in tasks:  # clients go away: the engine must free slots and blocks
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        await asyncio.sleep(0.05)
        body = (await c.get("/metrics")).text
        assert metric(body, "vllm:num_requests_running") == 0
        assert metric(body, "vllm:num_requests_waiting") == 0
        assert eng.kv.num_used == 0
        assert metric(body, "vllm:request_success_total", finished_reason="abort") == 12


async def test_vllm_body_has_histograms_counters_and_cache_config() -> None:
    async with SimFleet([PodSpec(profile="tiny")]) as fleet, httpx.AsyncClient(base_url=fleet.urls[0]) as c:
        r = await c.post("/v1/completions", json={"model": MODEL, "prompt": "hello there", "max_tokens": 10})
        assert r.status_code == 200
        resp = await c.get("/metrics")
        body = resp.text
    assert resp.headers["content-type"].startswith("text/plain")
    assert len(body.splitlines()) > 250  # a real vLLM body is hundreds of lines
    assert metric(body, "vllm:generation_tokens_total") == 10
    assert metric(body, "vllm:prompt_tokens_total") == 3
    assert metric(body, "vllm:request_success_total", finished_reason="length") == 1
    assert metric(body, "vllm:time_to_first_token_seconds_count") == 1
    assert metric(body, "vllm:inter_token_latency_seconds_count") == 9
    assert metric(body, "vllm:e2e_request_latency_seconds_count") == 1
    assert metric(body, "vllm:time_to_first_token_seconds_bucket", le="+Inf") == 1
    assert metric(body, "vllm:cache_config_info", block_size="16", num_gpu_blocks="64") == 1
    assert "# TYPE vllm:time_to_first_token_seconds histogram" in body
    assert "# TYPE vllm:prefix_cache_hits counter" in body


@pytest.mark.parametrize("fmt", ["sglang", "tgi"])
async def test_other_engine_formats(fmt: str) -> None:
    fleet = SimFleet([PodSpec(profile="tiny", metrics_format=fmt)])  # type: ignore[arg-type]
    async with fleet, httpx.AsyncClient(base_url=fleet.urls[0]) as c:
        eng = fleet.pods[0].engine
        tasks = [asyncio.create_task(_post(c, i)) for i in range(10)]
        await eventually(lambda: len(eng.running) + len(eng.waiting) == 10, within=10.0, interval=0.001)
        await _after_steps(eng, 1)
        body = (await c.get("/metrics")).text
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
    assert "vllm:" not in body
    if fmt == "sglang":
        assert metric(body, "sglang:num_running_reqs", model_name=MODEL) == 8
        assert metric(body, "sglang:num_queue_reqs") == 2
        assert 0 < metric(body, "sglang:token_usage") <= 1
        assert metric(body, "sglang:cache_config_info", page_size="16", num_pages="64") == 1
        assert "sglang:time_to_first_token_seconds_bucket" in body
    else:
        assert metric(body, "tgi_batch_current_size") == 8
        assert metric(body, "tgi_queue_size") == 2
        assert metric(body, "tgi_batch_current_max_tokens") == 8 * (30 + 300)
        assert "tgi_request_duration_bucket" in body
