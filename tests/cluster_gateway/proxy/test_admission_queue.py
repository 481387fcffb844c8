"""Admission: wait while saturated, admit when capacity frees, shed on timeout / full queue."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass

import pytest

from cluster_gateway.request_path.admission import AdmissionQueue
from common.errors import OpenAIError


@dataclass
class Capacity:
    """A stand-in for the scheduler: saturated until `free` is set."""

    free: bool = False
    calls: int = 0

    def schedule(self) -> str:
        self.calls += 1
        return "free" if self.free else "saturated"


def saturated(r: str) -> bool:
    return r == "saturated"


async def admit(q: AdmissionQueue[str], cap: Capacity, sheddable: bool = False, model: str = "m") -> str:
    return await q.admit(model, cap.schedule, saturated, lambda _r: sheddable)


async def test_unsaturated_request_is_admitted_without_queueing() -> None:
    q: AdmissionQueue[str] = AdmissionQueue(size=4, timeout_s=1.0)
    cap = Capacity(free=True)
    assert await admit(q, cap) == "free"
    assert len(q) == 0


async def test_queued_request_is_admitted_when_capacity_frees() -> None:
    q: AdmissionQueue[str] = AdmissionQueue(size=4, timeout_s=5.0)
    cap = Capacity()
    task = asyncio.create_task(admit(q, cap))
    await asyncio.sleep(0.05)
    assert len(q) == 1 and not task.done()
    q.notify()  # still saturated: stays queued
    await asyncio.sleep(0.02)
    assert not task.done()
    cap.free = True
    q.notify()
    assert await asyncio.wait_for(task, 1.0) == "free"
    assert len(q) == 0


async def test_waiter_is_shed_with_429_and_retry_after_at_deadline() -> None:
    q: AdmissionQueue[str] = AdmissionQueue(size=4, timeout_s=0.1)
    with pytest.raises(OpenAIError) as ei:
        await admit(q, Capacity())
    assert ei.value.status == 429
    assert int(ei.value.headers["retry-after"]) >= 1
    assert len(q) == 0


async def test_zero_size_queue_sheds_immediately() -> None:
    q: AdmissionQueue[str] = AdmissionQueue(size=0, timeout_s=5.0)
    with pytest.raises(OpenAIError) as ei:
        await asyncio.wait_for(admit(q, Capacity()), 0.5)
    assert ei.value.status == 429


async def test_full_queue_refuses_sheddable_and_non_sheddable_displaces_sheddable() -> None:
    q: AdmissionQueue[str] = AdmissionQueue(size=2, timeout_s=5.0)
    cap = Capacity()
    shed_waiter = asyncio.create_task(admit(q, cap, sheddable=True))
    keep_waiter = asyncio.create_task(admit(q, cap, sheddable=False))
    await asyncio.sleep(0.05)
    assert len(q) == 2
    # Full: a sheddable arrival is refused at once.
    with pytest.raises(OpenAIError) as ei:
        await asyncio.wait_for(admit(q, cap, sheddable=True), 0.5)
    assert ei.value.status == 429
    # A non-sheddable arrival takes the sheddable waiter's place.
    newcomer = asyncio.create_task(admit(q, cap, sheddable=False))
    with pytest.raises(OpenAIError) as ei2:
        await asyncio.wait_for(shed_waiter, 0.5)
    assert ei2.value.status == 429
    assert len(q) == 2
    # With no sheddable waiter left, another non-sheddable arrival is refused.
    with pytest.raises(OpenAIError):
        await asyncio.wait_for(admit(q, cap, sheddable=False), 0.5)
    cap.free = True
    q.notify()
    assert await asyncio.wait_for(keep_waiter, 1.0) == "free"
    assert await asyncio.wait_for(newcomer, 1.0) == "free"


async def test_admission_is_fifo_per_model() -> None:
    q: AdmissionQueue[str] = AdmissionQueue(size=8, timeout_s=5.0)
    cap = Capacity()
    order: list[int] = []

    async def one(i: int) -> None:
        await admit(q, cap)
        order.append(i)

    tasks = [asyncio.create_task(one(i)) for i in range(5)]
    await asyncio.sleep(0.05)
    cap.free = True
    q.notify()
    await asyncio.wait_for(asyncio.gather(*tasks), 1.0)
    assert order == [0, 1, 2, 3, 4]


async def test_a_saturated_model_does_not_block_waiters_of_another_model() -> None:
    q: AdmissionQueue[str] = AdmissionQueue(size=8, timeout_s=5.0)
    busy, idle = Capacity(), Capacity()
    blocked = asyncio.create_task(admit(q, busy, model="a"))
    other = asyncio.create_task(admit(q, idle, model="b"))
    await asyncio.sleep(0.05)
    idle.free = True
    q.notify()
    assert await asyncio.wait_for(other, 1.0) == "free"
    assert not blocked.done()
    blocked.cancel()
    with pytest.raises(asyncio.CancelledError):
        await blocked
    assert len(q) == 0  # a cancelled waiter (client gone) leaves the queue


async def test_schedule_errors_propagate_while_queued() -> None:
    q: AdmissionQueue[str] = AdmissionQueue(size=4, timeout_s=5.0)
    state = {"n": 0}

    def schedule() -> str:
        state["n"] += 1
        if state["n"] > 1:
            raise OpenAIError(503, "no endpoint")
        return "saturated"

    task = asyncio.create_task(q.admit("m", schedule, saturated, lambda _r: False))
    await asyncio.sleep(0.02)
    q.notify()
    with pytest.raises(OpenAIError) as ei:
        await asyncio.wait_for(task, 1.0)
    assert ei.value.status == 503
    assert len(q) == 0
