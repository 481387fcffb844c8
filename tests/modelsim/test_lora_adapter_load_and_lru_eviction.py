"""LoRA slots: a non-resident adapter pays its load time and evicts the least recently used one."""

from __future__ import annotations

import asyncio

import httpx

from modelsim.fleet import PodSpec, SimFleet
from tests.eventually import eventually
from tests.modelsim.simclient import label_value, stream_completion

LOAD_S = 0.25


async def test_non_resident_adapter_pays_load_time_and_evicts_lru() -> None:
    spec = PodSpec(profile="tiny", adapters=["a", "b", "c"], preload_adapters=["a", "b"], max_lora=2,
                   lora_load_s=LOAD_S)  # fmt: skip
    async with SimFleet([spec]) as fleet, httpx.AsyncClient(base_url=fleet.urls[0], timeout=30) as cl:
        eng = fleet.pods[0].engine
        await stream_completion(cl, "warm", 1, model="b")  # b resident: no load; LRU order now a, b
        resident = await stream_completion(cl, "hello", 2, model="b")
        assert list(eng.lora.resident) == ["a", "b"]

        cold = await stream_completion(cl, "hello", 2, model="c")
        assert list(eng.lora.resident) == ["b", "c"]  # a was least recently used
        assert eng.lora.evictions_total == 1

        again = await stream_completion(cl, "hello", 2, model="c")
        back = await stream_completion(cl, "hello", 2, model="a")  # evicts b (LRU after c was used)
        assert list(eng.lora.resident) == ["c", "a"]

    assert cold.ttft >= LOAD_S
    assert back.ttft >= LOAD_S
    assert resident.ttft < LOAD_S / 2
    assert again.ttft < LOAD_S / 2


async def test_request_waits_while_every_slot_is_in_use() -> None:
    spec = PodSpec(profile="tiny", adapters=["a", "b"], preload_adapters=["a"], max_lora=1, lora_load_s=0.05)
    async with SimFleet([spec]) as fleet, httpx.AsyncClient(base_url=fleet.urls[0], timeout=30) as cl:
        first = asyncio.create_task(stream_completion(cl, "long one", 40, model="a"))
        await eventually(lambda: bool(fleet.pods[0].engine.running), within=10.0, interval=0.001)
        second = asyncio.create_task(stream_completion(cl, "short", 2, model="b"))
        await asyncio.sleep(0.05)
        body = (await cl.get("/metrics")).text
        assert label_value(body, "vllm:lora_requests_info", "running_lora_adapters") == "a"
        assert label_value(body, "vllm:lora_requests_info", "waiting_lora_adapters") == "b"
        assert label_value(body, "vllm:lora_requests_info", "max_lora") == "1"
        a, b = await asyncio.gather(first, second)
    # b's only slot was held by a's running request until it finished
    assert b.chunk_times[0] >= a.chunk_times[-1]


async def test_load_and_unload_adapter_endpoints() -> None:
    fleet = SimFleet([PodSpec(profile="tiny", max_lora=2)])
    async with fleet, httpx.AsyncClient(base_url=fleet.urls[0], timeout=30) as cl:
        r = await cl.post("/v1/load_lora_adapter", json={"lora_name": "fin", "lora_path": "/m/fin"})
        assert r.status_code == 200
        models = (await cl.get("/v1/models")).json()["data"]
        fin = next(m for m in models if m["id"] == "fin")
        assert fin["parent"] == models[0]["id"] and fin["root"] == "/m/fin"
        assert (await stream_completion(cl, "x", 2, model="fin")).usage is not None
        r = await cl.post("/v1/unload_lora_adapter", json={"lora_name": "fin"})
        assert r.status_code == 200
        r = await cl.post("/v1/completions", json={"model": "fin", "prompt": "x"})
        assert r.status_code == 404
