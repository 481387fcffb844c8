"""Cancelling CapacityAgent.run() ends it promptly whatever it is doing (the gateway's stop relies on it)."""

from __future__ import annotations

import asyncio

import pytest

from cluster_gateway.agent.client import CapacityAgent
from tests.cluster_gateway.agent.pools import make_spec
from tests.eventually import eventually
from tests.global_router.capacity.helpers import TOKEN_A, running_server, sample_pool
from tests.procs import refusing_port


async def _cancel_within(task: asyncio.Task[None], seconds: float = 2.0) -> None:
    task.cancel()
    done, _ = await asyncio.wait({task}, timeout=seconds)
    assert done, "run() did not stop after cancel()"
    assert task.cancelled()


@pytest.mark.parametrize("cycles", [1, 5])
async def test_cancel_while_streaming(cycles: int) -> None:
    async with running_server(interval_ms=50) as (_, port, _):
        for _ in range(cycles):
            agent = CapacityAgent(make_spec(f"127.0.0.1:{port}"), sample_pool(), token=TOKEN_A)
            task = asyncio.create_task(agent.run())
            await eventually(lambda a=agent: a.connected, what="connect")  # type: ignore[misc]
            await asyncio.sleep(0.07)
            await _cancel_within(task)
            assert not agent.connected


async def test_cancel_while_backing_off_from_an_absent_router() -> None:
    with refusing_port() as port:
        agent = CapacityAgent(
            make_spec(f"127.0.0.1:{port}"), sample_pool(), token=TOKEN_A, backoff_initial_s=0.5
        )
        task = asyncio.create_task(agent.run())
        await eventually(lambda: agent.last_error is not None, what="first failure")
        await _cancel_within(task)


async def test_cancel_while_waiting_for_the_gateway_to_bind() -> None:
    agent = CapacityAgent(make_spec(), sample_pool(), token=TOKEN_A, gateway_url=lambda: None)
    task = asyncio.create_task(agent.run())
    await asyncio.sleep(0.05)
    await _cancel_within(task)
