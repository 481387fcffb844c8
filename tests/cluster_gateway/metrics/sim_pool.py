"""A pool over simulated pods, read once by a real Scraper: where catalog and report tests start."""

from __future__ import annotations

from typing import TYPE_CHECKING

from cluster_gateway.metrics.scraper import Scraper
from cluster_gateway.pool import Endpoint, EndpointPool
from common.config.gateway import Scrape

if TYPE_CHECKING:
    from modelsim.fleet import SimFleet


def sim_pool(fleet: SimFleet) -> EndpointPool:
    """One endpoint per simulated pod, named `sim-0`, `sim-1`, … in the fleet's order."""
    pool = EndpointPool()
    pool.set_endpoints(
        Endpoint(name=f"sim-{i}", address="127.0.0.1", port=pod.port) for i, pod in enumerate(fleet.pods)
    )
    return pool


async def read_pods_once(pool: EndpointPool, *, metrics: bool = False) -> None:
    """Refresh every pod's model list (and, with `metrics`, scrape it) once, as the gateway would."""
    scraper = Scraper(pool, Scrape(timeout_ms=2000))
    try:
        await scraper.refresh_models_once()
        if metrics:
            await scraper.scrape_once()
    finally:
        await scraper.aclose()
