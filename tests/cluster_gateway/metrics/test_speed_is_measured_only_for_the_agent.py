"""Pods' latency histograms are read only when something uses them (the capacity agent): a gateway
without an agent keeps its scrapes at the gauges' cost."""

from __future__ import annotations

import httpx

from cluster_gateway.metrics.scraper import Scraper
from cluster_gateway.pool import Endpoint, EndpointPool
from common.config.gateway import Scrape
from modelsim import fleet as fleet_mod


async def _scrape_after_one_request(measure_speed: bool) -> EndpointPool:
    async with fleet_mod.SimFleet([fleet_mod.PodSpec(profile="tiny", model="llama")]) as fleet:
        async with httpx.AsyncClient(timeout=10) as client:
            body = {"model": "llama", "prompt": "hello " * 20, "max_tokens": 4}
            assert (await client.post(fleet.urls[0] + "/v1/completions", json=body)).status_code == 200
        pool = EndpointPool()
        pool.set_endpoints([Endpoint(name="sim-0", address="127.0.0.1", port=fleet.pods[0].port)])
        scraper = Scraper(pool, Scrape(timeout_ms=2000), measure_speed=measure_speed)
        try:
            await scraper.scrape_once()
        finally:
            await scraper.aclose()
    return pool


async def test_agent_gateways_measure_pod_speed() -> None:
    pod = (await _scrape_after_one_request(measure_speed=True)).get("sim-0")
    assert pod is not None and pod.metrics is not None and pod.metrics.perf is not None
    assert pod.metrics.perf.prefill_s is not None and pod.metrics.perf.prefill_s > 0


async def test_gateways_without_an_agent_skip_the_histograms() -> None:
    pod = (await _scrape_after_one_request(measure_speed=False)).get("sim-0")
    assert pod is not None and pod.metrics is not None and pod.metrics.perf is None
