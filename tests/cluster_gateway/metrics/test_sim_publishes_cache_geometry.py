"""The simulator publishes the KV-cache geometry families real engines do (vLLM
`cache_config_info{block_size,num_gpu_blocks}`, SGLang `cache_config_info{page_size,num_pages}`),
and the gateway reads from them the pool each simulated pod really has: what the capacity agent
sizes a pod by when it has not measured a running cap."""

from __future__ import annotations

import time

import httpx

from cluster_gateway.metrics.engines import read_pod_sample
from modelsim.fleet import PodSpec, SimFleet


async def test_gateway_reads_each_engines_cache_geometry_from_the_simulator() -> None:
    specs = [
        PodSpec(profile="tiny", metrics_format="vllm"),
        PodSpec(profile="tiny", metrics_format="sglang", seed=1),
    ]
    async with SimFleet(specs) as fleet, httpx.AsyncClient(timeout=10) as c:
        for i, url in enumerate(fleet.urls):
            body = (await c.get(f"{url}/metrics")).content
            family = b"vllm:cache_config_info{" if i == 0 else b"sglang:cache_config_info{"
            assert family in body
            m = read_pod_sample(body, None, time.monotonic()).metrics
            kv = fleet.state(i)["kv"]  # the simulated engine's own pool
            assert (m.block_size, m.num_gpu_blocks) == (kv["block_size"], kv["num_gpu_blocks"])
