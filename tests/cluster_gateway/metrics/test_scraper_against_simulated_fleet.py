"""The scraper reads the simulator's three metric dialects and follows its live load and faults."""

from __future__ import annotations

import asyncio

import httpx

from cluster_gateway.metrics.scraper import Scraper
from cluster_gateway.pool import Endpoint, EndpointPool
from common.config.gateway import Scrape
from modelsim import fleet as fleet_mod
from tests.eventually import eventually


async def test_scraper_follows_simulated_vllm_sglang_and_tgi_pods() -> None:
    specs = [
        fleet_mod.PodSpec(
            profile="tiny", model="base", adapters=["sql"], preload_adapters=["sql"], time_scale=5.0
        ),
        fleet_mod.PodSpec(profile="tiny", model="base", metrics_format="sglang"),
        fleet_mod.PodSpec(profile="tiny", model="base", metrics_format="tgi"),
    ]
    async with fleet_mod.SimFleet(specs) as fleet:
        pool = EndpointPool()
        pool.set_endpoints(
            Endpoint(name=f"sim-{i}", address="127.0.0.1", port=pod.port) for i, pod in enumerate(fleet.pods)
        )
        scraper = Scraper(pool, Scrape(interval_ms=50, timeout_ms=1000, stale_after_misses=2))
        task = asyncio.create_task(scraper.run())
        try:
            states = [pool.get(f"sim-{i}") for i in range(3)]
            assert all(s is not None for s in states)
            await eventually(
                lambda: all(s is not None and s.metrics is not None and s.models for s in states)
            )
            engines = [s.metrics.engine for s in states if s is not None and s.metrics is not None]
            assert engines == ["vllm", "sglang", "tgi"]
            vllm_state = states[0]
            assert vllm_state is not None and vllm_state.metrics is not None
            assert {"base", "sql"} <= vllm_state.models
            assert vllm_state.metrics.max_lora == 4 and vllm_state.metrics.block_size is not None
            assert vllm_state.metrics.kv_usage is not None

            # Live load shows up while a request runs, then drains.
            async with httpx.AsyncClient() as client:
                request = asyncio.create_task(
                    client.post(
                        fleet.urls[0] + "/v1/completions",
                        json={"model": "sql", "prompt": "hello " * 50, "max_tokens": 64},
                        timeout=30,
                    )
                )
                await eventually(
                    lambda: (
                        vllm_state.metrics is not None
                        and vllm_state.metrics.running + vllm_state.metrics.waiting >= 1
                    )
                )
                assert "sql" in vllm_state.metrics.running_adapters | vllm_state.metrics.waiting_adapters
                assert (await request).status_code == 200
            await eventually(lambda: vllm_state.metrics is not None and vllm_state.metrics.running == 0)

            # A crashed pod goes stale; the others stay fresh.
            fleet.set_fault(1, "crash")
            sglang_state = states[1]
            assert sglang_state is not None
            await eventually(lambda: sglang_state.stale)
            assert not vllm_state.stale and states[2] is not None and not states[2].stale
        finally:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
