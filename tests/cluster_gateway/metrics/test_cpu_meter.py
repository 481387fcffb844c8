"""The scrape meter counts a coroutine's own CPU across its awaits, not its neighbours'."""

from __future__ import annotations

import asyncio
import time

import pytest

from cluster_gateway.metrics.cpu_meter import Metered


def _spin(seconds: float) -> None:
    end = time.thread_time() + seconds
    while time.thread_time() < end:
        pass


async def _work() -> str:
    for _ in range(3):
        _spin(0.01)
        await asyncio.sleep(0.005)
    return "done"


async def test_own_cpu_is_counted_and_a_neighbours_is_not() -> None:
    async def neighbour() -> None:
        for _ in range(10):
            _spin(0.01)
            await asyncio.sleep(0)

    other = asyncio.create_task(neighbour())
    metered = Metered(_work())
    assert await metered == "done"
    await other
    assert 0.029 <= metered.cpu_s < 0.06  # 3 x 10 ms of its own, not the neighbour's 100 ms


async def test_cancellation_reaches_the_coroutine() -> None:
    cleaned = []

    async def waits() -> None:
        try:
            await asyncio.sleep(10)
        finally:
            cleaned.append(True)

    task = asyncio.ensure_future(Metered(waits()))
    await asyncio.sleep(0.01)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert cleaned == [True]
