"""Batch traffic goes to the cheap cluster with room; interactive keeps to its latency target."""

from __future__ import annotations

import asyncio
from collections import Counter
from pathlib import Path

import httpx
import pytest

from tests.global_router.integration.fleet_harness import (
    BATCH_KEY,
    KEY,
    MODEL,
    fresh_ready,
    router_config,
    start_cluster,
    start_router,
    wait_for,
)

pytestmark = pytest.mark.timeout(90)


async def test_batch_prefers_cheap_spot_and_interactive_prefers_fast_capacity(tmp_path: Path) -> None:
    router = await start_router(router_config(["cheap", "premium"]))
    cheap = await start_cluster("cheap", tmp_path, router.grpc_port, pods=1, cost=0.9, capacity_type="spot")
    premium = await start_cluster("premium", tmp_path, router.grpc_port, pods=3, cost=4.0)
    try:
        await wait_for(fresh_ready(router, ["cheap", "premium"]), within_s=15, what="both clusters")
        body = {"model": MODEL, "messages": [{"role": "user", "content": "summarise"}], "max_tokens": 8}
        served: dict[str, Counter[str]] = {"batch": Counter(), "interactive": Counter()}
        async with httpx.AsyncClient(timeout=30) as client:

            async def one(cls: str, key: str) -> None:
                r = await client.post(
                    f"{router.url}/v1/chat/completions", json=body, headers={"authorization": f"Bearer {key}"}
                )
                assert r.status_code == 200, r.text
                served[cls][r.headers["x-fleetgate-cluster"]] += 1

            for _ in range(4):  # sequential waves: each sees fresh reports
                await asyncio.gather(*(one("batch", BATCH_KEY) for _ in range(3)))
                await asyncio.gather(*(one("interactive", KEY) for _ in range(3)))
        assert served["batch"]["cheap"] >= 9, served
        assert served["interactive"]["premium"] >= 9, served
    finally:
        await cheap.stop()
        await premium.stop()
        await router.stop()
