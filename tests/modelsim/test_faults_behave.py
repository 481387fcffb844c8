"""Injected faults look like the real failures: refused connections, error rates, stale metrics, hangs."""

from __future__ import annotations

import asyncio
import time

import httpx
import pytest

from modelsim.fleet import PodSpec, SimFleet
from tests.modelsim.conftest import MODEL
from tests.modelsim.simclient import metric, stream_completion

REQ = {"model": MODEL, "prompt": "hi", "max_tokens": 2}


async def test_crash_refuses_connections_until_cleared(tiny_fleet: SimFleet) -> None:
    url = tiny_fleet.urls[0]
    async with httpx.AsyncClient(base_url=url, timeout=5) as c:
        long = asyncio.create_task(c.post("/v1/completions", json={**REQ, "max_tokens": 500}))
        await asyncio.sleep(0.05)
        r = await c.post("/admin/faults", json={"mode": "crash"})
        assert r.status_code == 200
        with pytest.raises(httpx.TransportError):
            await long  # the in-flight request dies with the process
    await asyncio.sleep(0.05)
    async with httpx.AsyncClient(base_url=url, timeout=5) as c:
        with pytest.raises(httpx.ConnectError):
            await c.get("/health")
        tiny_fleet.set_fault(0, "none")
        r = await c.get("/health")
        assert r.status_code == 200
        state = (await c.get("/admin/state")).json()
        assert state["counters"]["generation_tokens_total"] == 0  # a restart starts empty
        assert (await c.post("/v1/completions", json=REQ)).status_code == 200


async def test_crash_with_duration_restarts_by_itself(tiny_fleet: SimFleet) -> None:
    tiny_fleet.set_fault(0, "crash", duration_s=0.2)
    async with httpx.AsyncClient(base_url=tiny_fleet.urls[0], timeout=5) as c:
        with pytest.raises(httpx.ConnectError):
            await c.get("/health")
        await asyncio.sleep(0.35)
        assert (await c.get("/health")).status_code == 200


@pytest.mark.parametrize(("mode", "status"), [("error", 503), ("429", 429)])
async def test_error_rates_are_honoured(client: httpx.AsyncClient, mode: str, status: int) -> None:
    params = {"mode": mode, "rate": 0.5}
    if mode == "error":
        params["status"] = 503
    assert (await client.post("/admin/faults", json=params)).status_code == 200
    codes = [(await client.post("/v1/completions", json=REQ)) for _ in range(60)]
    failed = [r for r in codes if r.status_code == status]
    assert all(r.status_code in (200, status) for r in codes)
    assert 15 <= len(failed) <= 45
    body = failed[0].json()["error"]
    assert body["type"] == ("rate_limit_error" if mode == "429" else "server_error")
    if mode == "429":
        assert failed[0].headers["retry-after"] == "1"
    await client.post("/admin/faults", json={"mode": "none"})
    assert (await client.post("/v1/completions", json=REQ)).status_code == 200


async def test_stale_metrics_freeze_the_last_body(client: httpx.AsyncClient, tiny_fleet: SimFleet) -> None:
    last = (await client.get("/metrics")).text
    await client.post("/admin/faults", json={"mode": "stale"})
    await client.post("/v1/completions", json={**REQ, "max_tokens": 5})
    assert (await client.get("/metrics")).text == last  # the body of the last scrape before the fault
    assert (await client.get("/metrics")).text == last
    assert tiny_fleet.pods[0].engine.stats.generation_tokens_total == 5
    await client.post("/admin/faults", json={"mode": "none"})
    assert metric((await client.get("/metrics")).text, "vllm:generation_tokens_total") == 5


async def test_hang_accepts_but_never_answers_until_cleared(tiny_fleet: SimFleet) -> None:
    async with httpx.AsyncClient(base_url=tiny_fleet.urls[0], timeout=0.3) as c:
        await c.post("/admin/faults", json={"mode": "hang"})
        with pytest.raises(httpx.ReadTimeout):
            await c.get("/health")
        with pytest.raises(httpx.ReadTimeout):
            await c.post("/v1/completions", json=REQ)
        assert (await c.get("/admin/state")).json()["fault"]["mode"] == "hang"
        await c.post("/admin/faults", json={"mode": "none"})
        assert (await c.get("/health")).status_code == 200


async def test_slow_multiplies_step_time(client: httpx.AsyncClient) -> None:
    base = await stream_completion(client, "tell me", 20)
    await client.post("/admin/faults", json={"mode": "slow", "factor": 4})
    slow = await stream_completion(client, "tell me", 20)
    assert slow.total > 2.5 * base.total
    t0 = time.monotonic()
    await client.post("/admin/faults", json={"mode": "none"})
    fast = await stream_completion(client, "tell me", 20)
    assert fast.total < slow.total / 2
    assert time.monotonic() - t0 < 5


async def test_fault_flag_at_start() -> None:
    fleet = SimFleet([PodSpec(profile="tiny", fault="error")])
    async with fleet, httpx.AsyncClient(base_url=fleet.urls[0]) as c:
        assert (await c.post("/v1/completions", json=REQ)).status_code == 500
