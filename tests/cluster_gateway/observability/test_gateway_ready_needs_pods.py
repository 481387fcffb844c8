"""`/ready` on a gateway: not ready (an OpenAI-shaped 503) until discovery found a pod and it was
scraped; `/health` (liveness) is 200 throughout."""

from __future__ import annotations

import asyncio

import httpx

from cluster_gateway.gateway import ClusterGateway
from cluster_gateway.pool import Endpoint, EndpointPool
from common.config.gateway import GatewaySpec
from common.config.loader import load_config_data
from modelsim.fleet import PodSpec, SimFleet
from tests.eventually import eventually


class GatedDiscovery:
    """Finds nothing until the test says so, then one pod."""

    def __init__(self, endpoint: Endpoint) -> None:
        self.endpoint = endpoint
        self.go = asyncio.Event()

    async def run(self, pool: EndpointPool) -> None:
        await self.go.wait()
        pool.set_endpoints([self.endpoint])
        await asyncio.Event().wait()


async def test_ready_only_once_pods_are_known_and_fresh() -> None:
    async with SimFleet([PodSpec(profile="tiny")]) as sims:
        host, port = sims.urls[0].removeprefix("http://").split(":")
        spec = load_config_data(
            {"discovery": {"static": {"endpoints": sims.urls}}, "scrape": {"intervalMs": 50}}, GatewaySpec
        )
        gw = ClusterGateway(spec, port=0)
        discovery = GatedDiscovery(Endpoint(name="pod-0", address=host, port=int(port)))
        gw.discovery = discovery  # type: ignore[assignment]
        await gw.start()
        try:
            async with httpx.AsyncClient(base_url=gw.url, timeout=10) as c:
                assert (await c.get("/health")).status_code == 200  # alive, with nothing to route to
                r = await c.get("/ready")
                assert r.status_code == 503
                doc = r.json()
                assert doc["ready"] is False and doc["pods"] == 0
                assert doc["error"]["code"] == "gateway_not_ready"
                assert "no pod is known" in doc["error"]["message"]
                discovery.go.set()
                await eventually(lambda: any(not p.stale for p in gw.pool.pods()), within=15, what="scraped")
                r = await c.get("/ready")
                assert r.status_code == 200
                assert r.json() == {"ready": True, "pods": 1, "readyPods": 1, "degraded": False}
        finally:
            await gw.stop()
