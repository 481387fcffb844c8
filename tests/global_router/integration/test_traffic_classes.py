"""Batch traffic goes to the cheap cluster with room; interactive keeps to its latency target."""

from __future__ import annotations

import asyncio
import statistics
import time
from collections import Counter
from pathlib import Path

import httpx
import pytest

from tests.eventually import eventually
from tests.global_router.integration.fleet_harness import (
    BATCH_KEY,
    KEY,
    MODEL,
    fresh_ready,
    router_config,
    start_cluster,
    start_router,
)

pytestmark = pytest.mark.timeout(90)


async def test_batch_fills_cheap_spot_while_interactive_keeps_its_ttft_target(tmp_path: Path) -> None:
    # what is measured is placement by class, not freshness: a report a loaded machine delivers
    # late must not rank its cluster behind the other (staleAfterS 10 instead of the harness's 1.5)
    router = await start_router(router_config(["cheap", "premium"], stale_after_s=10.0))
    # one spot pod 4x slower than three on-demand pods at 8x the price: cheaper per token too
    cheap = await start_cluster(
        "cheap", tmp_path, router.grpc_port, pods=1, cost=0.5, capacity_type="spot", time_scale=4
    )
    premium = await start_cluster("premium", tmp_path, router.grpc_port, pods=3, cost=4.0)
    try:
        await eventually(fresh_ready(router, ["cheap", "premium"]), within=15, what="both clusters")
        await eventually(fresh_ready(router, ["premium"], min_pods=3), within=15, what="all premium pods")
        batch_body = {
            "model": MODEL,
            "messages": [{"role": "user", "content": "summarise " * 20}],
            "max_tokens": 48,
        }
        chat_body = {"model": MODEL, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 4}
        batch: Counter[str] = Counter()
        interactive: Counter[str] = Counter()
        predicted: dict[str, list[float]] = {"cheap": [], "premium": []}
        async with httpx.AsyncClient(timeout=60) as client:

            async def send(body: dict, key: str) -> str:
                r = await client.post(
                    f"{router.url}/v1/chat/completions", json=body, headers={"authorization": f"Bearer {key}"}
                )
                assert r.status_code == 200, r.text
                return r.headers["x-fleetgate-cluster"]

            for _ in range(3):  # idle fleet: batch takes the cheapest capacity
                batch[await send(chat_body, BATCH_KEY)] += 1
            assert batch["cheap"] == 3, batch

            stop_at = time.monotonic() + 3.0

            async def batch_worker() -> None:
                while time.monotonic() < stop_at:
                    batch[await send(batch_body, BATCH_KEY)] += 1

            async def interactive_user() -> None:
                await asyncio.sleep(1.0)  # the cheap pod is saturated by now and its reports say so
                while time.monotonic() < stop_at:
                    interactive[await send(chat_body, KEY)] += 1
                    for cid, series in predicted.items():
                        cap = router.fleet.get(cid)
                        if cap is not None:
                            series.append(cap.models[MODEL].est_ttft_ms)

            await asyncio.gather(*(batch_worker() for _ in range(12)), interactive_user())
        assert batch["cheap"] >= 8, batch
        assert sum(interactive.values()) >= 3
        assert interactive["premium"] >= 0.9 * sum(interactive.values()), interactive  # cheap is over target
        # what batch was priced by: both agents report throughput per GPU, the slow pod's is lower
        rates = {cid: router.fleet.get(cid).models[MODEL].gpu_tokens_per_s for cid in ("cheap", "premium")}  # type: ignore[union-attr]
        assert 0 < rates["cheap"] < rates["premium"], rates
        # what kept interactive away: the loaded slow pod's predicted TTFT, well above the premium one's
        # (medians: one report may carry a cold first measurement, e.g. a single slow prefill)
        assert statistics.median(predicted["cheap"]) > 2 * statistics.median(predicted["premium"]), predicted
    finally:
        await cheap.stop()
        await premium.stop()
        await router.stop()
