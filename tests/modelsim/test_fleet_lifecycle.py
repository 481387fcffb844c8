"""SimFleet starts pods on the ports asked for, and stops promptly even mid-stream or mid-hang."""

from __future__ import annotations

import asyncio
import time

import httpx
import pytest

from modelsim.fleet import PodSpec, SimFleet
from tests.modelsim.conftest import MODEL
from tests.procs import free_port


async def test_base_port_gives_consecutive_ports() -> None:
    base = free_port()
    fleet = SimFleet([PodSpec(profile="tiny"), PodSpec(profile="tiny")], base_port=base)
    try:
        await fleet.start()
    except OSError as exc:
        pytest.skip(f"the neighbouring port was taken meanwhile: {exc}")
    try:
        assert [p.port for p in fleet.pods] == [base, base + 1]
        assert fleet.urls == [f"http://127.0.0.1:{base}", f"http://127.0.0.1:{base + 1}"]
    finally:
        await fleet.stop()


async def test_stop_is_prompt_with_streams_and_hung_requests_in_flight() -> None:
    fleet = SimFleet([PodSpec(profile="tiny"), PodSpec(profile="tiny")])
    await fleet.start()
    body = {"model": MODEL, "prompt": "go on", "max_tokens": 1000 - 2, "stream": True}
    fleet.set_fault(1, "hang")
    async with httpx.AsyncClient(timeout=10) as c:

        async def stream() -> int:
            chunks = 0
            try:
                async with c.stream("POST", fleet.urls[0] + "/v1/completions", json=body) as r:
                    async for _ in r.aiter_lines():
                        chunks += 1
            except httpx.HTTPError:
                pass
            return chunks

        s = asyncio.create_task(stream())
        hung = asyncio.create_task(c.get(fleet.urls[1] + "/health"))
        await asyncio.sleep(0.1)
        t0 = time.monotonic()
        await fleet.stop()
        assert time.monotonic() - t0 < 3
        assert await asyncio.wait_for(s, 5) > 0
        await asyncio.wait_for(asyncio.gather(hung, return_exceptions=True), 5)


def test_start_in_thread_serves_sync_clients_and_state() -> None:
    fleet = SimFleet([PodSpec(profile="tiny", adapters=["x"])])
    fleet.start_in_thread()
    try:
        r = httpx.post(fleet.urls[0] + "/v1/completions", json={"model": "x", "prompt": "p", "max_tokens": 3})
        assert r.status_code == 200
        state = fleet.state(0)
        assert state["counters"]["request_success_total"]["length"] == 1
        fleet.set_fault(0, "429", rate=1.0)
        assert (
            httpx.post(fleet.urls[0] + "/v1/completions", json={"model": "x", "prompt": "p"}).status_code
            == 429
        )
        with pytest.raises(ValueError, match="rate"):
            fleet.set_fault(0, "429", rate=2)
    finally:
        fleet.stop_thread()
    with pytest.raises(httpx.ConnectError):
        httpx.get(fleet.urls[0] + "/health")


def test_bad_specs_name_the_field() -> None:
    with pytest.raises(ValueError, match="pod 0: profile: unknown profile"):
        SimFleet([PodSpec(profile="nope")])
    with pytest.raises(ValueError, match="pod 1: preload_adapters"):
        SimFleet([PodSpec(), PodSpec(preload_adapters=["z"])])
    with pytest.raises(ValueError, match="max_lora"):
        SimFleet([PodSpec(adapters=["a"], max_lora=0)])
