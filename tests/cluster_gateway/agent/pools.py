"""Hand-built pools and specs for agent tests."""

from __future__ import annotations

import time

from cluster_gateway.pool import Endpoint, EndpointPool, PodMetrics
from common.config.gateway import (
    CapacityInfo,
    Discovery,
    GatewaySpec,
    GlobalRouterLink,
    StaticDiscovery,
)


def make_spec(
    address: str = "127.0.0.1:1",
    *,
    cluster_id: str = "c-a",
    interval_ms: int = 1000,
    capacity: CapacityInfo | None = None,
) -> GatewaySpec:
    return GatewaySpec(
        cluster_id=cluster_id,
        region="eu-west",
        zone="eu-west-1a",
        port=8080,
        public_url=f"http://{cluster_id}.example:8080",
        discovery=Discovery(static=StaticDiscovery()),
        global_router=GlobalRouterLink(address=address, report_interval_ms=interval_ms),
        capacity=capacity or CapacityInfo(),
    )


def add_pod(
    pool: EndpointPool,
    name: str,
    *,
    models: set[str],
    catalog: dict[str, str] | None = None,
    waiting: int = 0,
    running: int = 0,
    kv: float | None = 0.1,
    adapters: set[str] | frozenset[str] = frozenset(),
    waiting_adapters: set[str] | frozenset[str] = frozenset(),
    engine: str = "vllm",
    scraped: bool = True,
    age_s: float = 0.0,
) -> None:
    port = 9000 + len(pool)
    pool.upsert(Endpoint(name=name, address="127.0.0.1", port=port))
    if catalog is None:
        pool.set_models(name, models)  # no parent info: the agent classifies by rule
    else:  # exact: `models` are base models, `catalog` maps each adapter to its parent
        pool.set_catalog(name, models, catalog)
    if scraped:
        pool.record_scrape(
            name,
            PodMetrics(
                engine=engine,  # type: ignore[arg-type]
                waiting=waiting,
                running=running,
                kv_usage=kv,
                running_adapters=frozenset(adapters),
                waiting_adapters=frozenset(waiting_adapters),
                max_lora=4,
                scraped_at=time.monotonic() - age_s,
            ),
        )
