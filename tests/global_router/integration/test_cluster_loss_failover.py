"""A whole cluster dies under load: no admitted non-streaming request is lost; traffic moves at once."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import httpx
import pytest

from tests.eventually import eventually
from tests.global_router.integration.fleet_harness import (
    ADMIN_HEADERS,
    KEY,
    MODEL,
    fresh_ready,
    router_config,
    start_cluster,
    start_router,
)

pytestmark = pytest.mark.timeout(90)


async def test_killing_a_cluster_mid_load_loses_nothing(tmp_path: Path) -> None:
    router = await start_router(router_config(["doomed", "survivor"]))
    doomed = await start_cluster("doomed", tmp_path, router.grpc_port, pods=2)
    survivor = await start_cluster("survivor", tmp_path, router.grpc_port, pods=2)
    results: list[tuple[float, int, str]] = []  # (finished at, status, cluster)
    try:
        await eventually(fresh_ready(router, ["doomed", "survivor"]), within=15, what="both clusters")
        body = {"model": MODEL, "messages": [{"role": "user", "content": "keep going"}], "max_tokens": 12}
        stop_at = time.monotonic() + 4.0
        async with httpx.AsyncClient(timeout=30) as client:

            async def worker() -> None:
                while time.monotonic() < stop_at:
                    r = await client.post(
                        f"{router.url}/v1/chat/completions",
                        json=body,
                        headers={"authorization": f"Bearer {KEY}"},
                    )
                    results.append(
                        (time.monotonic(), r.status_code, r.headers.get("x-fleetgate-cluster", "-"))
                    )

            async def killer() -> float:
                await asyncio.sleep(1.2)
                assert any(c == "doomed" for _, _, c in results), (
                    "doomed cluster served nothing before the kill"
                )
                t = time.monotonic()
                await doomed.kill()
                return t

            workers = [asyncio.create_task(worker()) for _ in range(8)]
            killed_at = await killer()
            await asyncio.gather(*workers)
        statuses = [s for _, s, _ in results]
        assert statuses.count(200) == len(statuses), f"lost requests: {[s for s in statuses if s != 200]}"
        after = [c for t, _, c in results if t > killed_at + 2.0]
        assert after and set(after) == {"survivor"}, "traffic did not move within 2 s"
        async with httpx.AsyncClient() as client:
            fleet = (await client.get(f"{router.url}/fleet", headers=ADMIN_HEADERS)).json()
        doomed_view = next(c for c in fleet["clusters"] if c["id"] == "doomed")
        assert not doomed_view["fresh"] or doomed_view["ejected_for_s"] > 0
    finally:
        await survivor.stop()
        await doomed.sims.stop()
        await router.stop()
