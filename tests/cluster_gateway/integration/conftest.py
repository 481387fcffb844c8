"""A real gateway over real simulated pods, all on loopback in the test's event loop."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from typing import Any

import httpx

from cluster_gateway.gateway import ClusterGateway
from common.config.gateway import GatewaySpec
from common.config.loader import load_config_data
from modelsim.fleet import PodSpec, SimFleet
from tests.eventually import eventually

MODEL = "meta-llama/Llama-3.1-8B-Instruct"


def tiny(**kw: Any) -> PodSpec:
    return PodSpec(profile="tiny", **kw)


def gateway_spec(urls: list[str], **overrides: Any) -> GatewaySpec:
    data: dict[str, Any] = {
        "discovery": {"static": {"endpoints": urls}},
        "scrape": {"intervalMs": 50, "timeoutMs": 500, "maxStalenessMs": 1000},
        "proxy": {"debugHeaders": True},
    }
    for k, v in overrides.items():
        if isinstance(v, dict) and isinstance(data.get(k), dict):
            data[k] = {**data[k], **v}
        else:
            data[k] = v
    return load_config_data(data, GatewaySpec, source="test")


async def wait_ready(gw: ClusterGateway, n_pods: int, within_s: float = 10.0) -> None:
    """Until every pod has fresh metrics and a model list (routing can use all of them)."""

    def ready() -> bool:
        pods = gw.pool.pods()
        return len(pods) == n_pods and all(not p.stale and p.models for p in pods)

    await eventually(ready, within=within_s, what=f"{n_pods} pods with fresh metrics and model lists")


def freeze_scrapes(gw: ClusterGateway) -> None:
    """No more scrapes from here on: the pool keeps what it last read, so a test can fault a pod the
    gateway still believes healthy. A long interval alone does not do it: each pod's second scrape comes
    at a random phase within the interval and, on a loaded machine, can land mid-test (a failed scrape
    of the faulted pod drops it from the fresh set before the data path ever tries it). Every due
    scrape now counts as kept fresh elsewhere, as a peer replica's shard is under scrape sharing."""
    gw.scraper.skip = lambda _name: True


@contextlib.asynccontextmanager
async def running(
    specs: list[PodSpec], **overrides: Any
) -> AsyncIterator[tuple[SimFleet, ClusterGateway, httpx.AsyncClient]]:
    async with SimFleet(specs) as fleet:
        spec = gateway_spec(fleet.urls, **overrides)
        gw = ClusterGateway(spec, port=0, extproc_port=0)
        await gw.start()
        try:
            await wait_ready(gw, len(specs))
            async with httpx.AsyncClient(base_url=gw.url, timeout=30) as client:
                yield fleet, gw, client
        finally:
            await gw.stop()


def served_requests(fleet: SimFleet, i: int) -> int:
    """Requests pod `i` finished, from the simulator's own counters (not the gateway's word)."""
    counters = fleet.state(i)["counters"]["request_success_total"]
    return int(sum(counters.values()))


def chat(content: str, max_tokens: int = 4, **extra: Any) -> dict[str, Any]:
    return {
        "model": MODEL,
        "messages": [{"role": "user", "content": content}],
        "max_tokens": max_tokens,
        **extra,
    }
