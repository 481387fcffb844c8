"""A router on loopback over fake gateways, with cluster states published by the test."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import httpx

from common.config.loader import load_config_data
from common.config.router import GlobalRouterConfig
from global_router.fleet_view import MemoryFleetView
from global_router.router import GlobalRouter
from global_router.tenants import hash_key
from tests.global_router.fakes import FakeGateway
from tests.global_router.fleet_fixtures import cluster

KEY = "sk-test-acme"
BATCH_KEY = "sk-test-batch"
ADMIN_KEY = "admin-secret"


def router_config(*, tenants: list[dict[str, Any]] | None = None, **overrides: Any) -> GlobalRouterConfig:
    data: dict[str, Any] = {
        "tenants": [
            {"name": "acme", "apiKeySha256": [hash_key(KEY)], "requestsPerMinute": 1000},
            {
                "name": "nightly",
                "apiKeySha256": [hash_key(BATCH_KEY)],
                "trafficClass": "batch",
                "sheddable": True,
            },
            {
                "name": "limited",
                "apiKeySha256": [hash_key("sk-limited")],
                "requestsPerMinute": 2,
                "tokensPerMinute": 500,
            },
            {"name": "m1-only", "apiKeySha256": [hash_key("sk-m1")], "allowedModels": ["m1"]},
            *(tenants or []),
        ],
        "adminKeySha256": hash_key(ADMIN_KEY),
        "failover": {"ejectAfterFailures": 2, "ejectBaseS": 5},
        "maxBodyBytes": 4096,
    }
    data.update(overrides)
    return load_config_data(data, GlobalRouterConfig)


class Harness:
    def __init__(
        self, router: GlobalRouter, fleet: MemoryFleetView, gateways: dict[str, FakeGateway]
    ) -> None:
        self.router = router
        self.fleet = fleet
        self.gateways = gateways
        self.client = httpx.AsyncClient(base_url=router.url, timeout=10.0)

    async def publish(self, cid: str, **kw: Any) -> None:
        gw = self.gateways.get(cid)
        url = kw.pop("url", gw.url if gw else "http://127.0.0.1:9")
        await self.fleet.publish(cluster(cid, url=url, **kw))

    def headers(self, key: str = KEY, **extra: str) -> dict[str, str]:
        return {"authorization": f"Bearer {key}", **extra}


@asynccontextmanager
async def harness(names: list[str], cfg: GlobalRouterConfig | None = None) -> AsyncIterator[Harness]:
    gateways = {n: FakeGateway(n) for n in names}
    for g in gateways.values():
        await g.start()
    fleet = MemoryFleetView(ttl_s=300)  # forgetAfterS: a slow test never loses its clusters
    router = GlobalRouter(cfg or router_config(), http_port=0, fleet=fleet, capacity_server=False)
    await router.start()
    h = Harness(router, fleet, gateways)
    try:
        yield h
    finally:
        await h.client.aclose()
        await router.stop()
        for g in gateways.values():
            await g.stop()
