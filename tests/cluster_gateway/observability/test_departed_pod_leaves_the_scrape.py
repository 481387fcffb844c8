"""On a running gateway: a pod that leaves discovery has no series in the next scrape (within the
render's reuse of at most 1 s), while the pod that stays keeps its counts."""

from __future__ import annotations

import asyncio
import time

import httpx
from prometheus_client.parser import text_string_to_metric_families

from cluster_gateway.gateway import ClusterGateway
from cluster_gateway.pool import Endpoint, EndpointPool
from common.config.gateway import GatewaySpec
from common.config.loader import load_config_data
from modelsim.fleet import PodSpec, SimFleet
from tests.eventually import eventually

MODEL = "meta-llama/Llama-3.1-8B-Instruct"


class SteeredDiscovery:
    """Discovery the test drives: `publish()` replaces the pool's membership."""

    def __init__(self, endpoints: list[Endpoint]) -> None:
        self.endpoints = endpoints
        self.changed = asyncio.Event()

    def publish(self, endpoints: list[Endpoint]) -> None:
        self.endpoints = endpoints
        self.changed.set()

    async def run(self, pool: EndpointPool) -> None:
        while True:
            pool.set_endpoints(self.endpoints)
            await self.changed.wait()
            self.changed.clear()


def _endpoint(name: str, url: str) -> Endpoint:
    host, port = url.removeprefix("http://").split(":")
    return Endpoint(name=name, address=host, port=int(port))


def _pods(text: str, family: str | None = None) -> set[str]:
    """Pod label values in a scrape (of one family, or of all)."""
    return {
        s.labels["pod"]
        for f in text_string_to_metric_families(text)
        if family is None or f.name == family
        for s in f.samples
        if "pod" in s.labels
    }


async def test_a_pod_that_left_discovery_has_no_series() -> None:
    async with SimFleet([PodSpec(profile="tiny"), PodSpec(profile="tiny", seed=1)]) as sims:
        spec = load_config_data(
            {"discovery": {"static": {"endpoints": sims.urls}}, "scrape": {"intervalMs": 50}}, GatewaySpec
        )
        gw = ClusterGateway(spec, port=0)
        discovery = SteeredDiscovery([_endpoint("pod-a", sims.urls[0]), _endpoint("pod-b", sims.urls[1])])
        gw.discovery = discovery  # type: ignore[assignment]
        await gw.start()
        try:
            await eventually(lambda: sum(not p.stale for p in gw.pool.pods()) == 2, within=15, what="scraped")
            body = {"model": MODEL, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 2}
            async with httpx.AsyncClient(base_url=gw.url, timeout=30) as c:
                served: set[str] = set()
                for _ in range(40):  # until both pods served (the picker spreads on in-flight counts)
                    r = await c.post("/v1/chat/completions", json=body)
                    assert r.status_code == 200
                    served = _pods((await c.get("/metrics")).text, "fleetgate_gateway_tokens")
                    if served == {"pod-a", "pod-b"}:
                        break
                assert served == {"pod-a", "pod-b"}
                discovery.publish([_endpoint("pod-a", sims.urls[0])])  # pod-b is gone (a rollout)
                await eventually(lambda: gw.pool.get("pod-b") is None, within=5, what="pod-b removed")
                deadline = time.monotonic() + 5  # a render is reused for at most 1 s
                while "pod-b" in _pods((await c.get("/metrics")).text):
                    assert time.monotonic() < deadline, "pod-b's series outlived it"
                    await asyncio.sleep(0.05)
                assert "pod-a" in _pods((await c.get("/metrics")).text, "fleetgate_gateway_tokens")
        finally:
            await gw.stop()
