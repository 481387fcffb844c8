"""SGLang-flavoured pods answer SGLang's native endpoints (what sglang-router reads); vLLM pods 404 them."""

from __future__ import annotations

import asyncio

import httpx

from modelsim.fleet import PodSpec, SimFleet
from tests.eventually import eventually
from tests.modelsim.conftest import MODEL
from tests.modelsim.simclient import distinct_prompt, stream_completion

SGLANG_ONLY = (
    "/model_info",
    "/get_model_info",
    "/server_info",
    "/get_server_info",
    "/get_load",
    "/health_generate",
)


async def test_model_and_server_info_describe_the_served_model() -> None:
    spec = PodSpec(profile="tiny", metrics_format="sglang", adapters=["sql"], max_lora=2)
    async with SimFleet([spec]) as fleet, httpx.AsyncClient(base_url=fleet.urls[0], timeout=30) as c:
        model_info = (await c.get("/model_info")).json()
        old_model_info = (await c.get("/get_model_info")).json()
        server = (await c.get("/server_info")).json()
        old_server = (await c.get("/get_server_info")).json()
        profile = fleet.pods[0].engine.profile

    assert model_info == old_model_info
    assert model_info["model_path"] == MODEL and model_info["is_generation"] is True
    assert model_info["architectures"] == ["LlamaForCausalLM"]
    assert server["served_model_name"] == MODEL and server["model_path"] == MODEL
    assert server["dp_size"] == 1
    assert server["context_length"] == profile.max_model_len
    assert server["max_running_requests"] == profile.max_num_seqs
    assert server["max_total_num_tokens"] == fleet.pods[0].engine.kv.num_blocks * profile.block_size
    assert server["lora_paths"] == {"sql": fleet.pods[0].engine.lora.known["sql"]}
    assert server["port"] == int(fleet.urls[0].rsplit(":", 1)[1])
    assert isinstance(server["version"], str) and server["internal_states"]
    assert old_server["served_model_name"] == MODEL


async def test_get_load_counts_running_waiting_and_tokens() -> None:
    # one sequence at a time and a slow clock: the second and third requests must wait
    spec = PodSpec(profile="tiny", metrics_format="sglang", max_num_seqs=1, time_scale=5.0)
    async with SimFleet([spec]) as fleet, httpx.AsyncClient(base_url=fleet.urls[0], timeout=60) as c:
        idle = (await c.get("/get_load")).json()
        eng = fleet.pods[0].engine
        tasks = [asyncio.create_task(stream_completion(c, distinct_prompt(i, 100), 20)) for i in range(3)]
        await eventually(lambda: len(eng.running) == 1 and len(eng.waiting) == 2, within=10.0, interval=0.001)
        busy = (await c.get("/get_load")).json()
        await asyncio.gather(*tasks)

    assert idle == [{"dp_rank": 0, "num_reqs": 0, "num_waiting_reqs": 0, "num_tokens": 0}]
    assert len(busy) == 1 and busy[0]["dp_rank"] == 0
    assert busy[0]["num_reqs"] == 3 and busy[0]["num_waiting_reqs"] == 2
    assert busy[0]["num_tokens"] >= 2 * 100  # the waiting prompts at least


async def test_health_generate_runs_one_token_and_flush_cache_waits_for_idle() -> None:
    spec = PodSpec(profile="tiny", metrics_format="sglang", max_num_seqs=1, time_scale=5.0)
    async with SimFleet([spec]) as fleet, httpx.AsyncClient(base_url=fleet.urls[0], timeout=60) as c:
        eng = fleet.pods[0].engine
        before = eng.stats.generation_tokens_total
        assert (await c.get("/health_generate")).status_code == 200
        generated = eng.stats.generation_tokens_total - before

        prompt = distinct_prompt(7, 200)
        await stream_completion(c, prompt, 1)
        busy_task = asyncio.create_task(stream_completion(c, distinct_prompt(8, 100), 30))
        await eventually(lambda: bool(eng.running), within=10.0, interval=0.001)
        refused = await c.post("/flush_cache")
        await busy_task
        flushed = await c.post("/flush_cache")
        again = await stream_completion(c, prompt, 1)

    assert generated == 1
    assert refused.status_code == 400 and "running or waiting" in refused.text
    assert flushed.status_code == 200 and flushed.text.startswith("Cache flushed.")
    assert again.usage is not None and again.usage["prompt_tokens_details"] == {"cached_tokens": 0}


async def test_vllm_pods_do_not_serve_sglang_endpoints() -> None:
    async with SimFleet([PodSpec(profile="tiny")]) as fleet, httpx.AsyncClient(base_url=fleet.urls[0]) as c:
        statuses = {path: (await c.get(path)).status_code for path in SGLANG_ONLY}
        flush = (await c.post("/flush_cache")).status_code
    assert statuses == dict.fromkeys(SGLANG_ONLY, 404)
    assert flush == 404
