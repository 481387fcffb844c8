"""The gateway's GC policy: a larger young-generation threshold while it runs, the heap frozen once
warm and refreshed, and the interpreter's settings back when the last policy stops."""

from __future__ import annotations

import asyncio
import gc

import pytest

from common.gc_policy import GEN0, GcPolicy
from tests.eventually import eventually


async def test_the_policy_freezes_the_warm_heap_and_restores_the_defaults() -> None:
    before = gc.get_threshold()
    policy = GcPolicy(gen0=12_345, warmup_s=0.0, refresh_s=3600.0)
    task = asyncio.create_task(policy.run())
    try:
        await eventually(lambda: policy.settled == 1, what="first freeze")
        assert gc.get_threshold()[0] == max(12_345, before[0])
        assert gc.get_freeze_count() > 0
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
    assert gc.get_threshold() == before
    assert gc.get_freeze_count() == 0


async def test_two_policies_share_the_setting_until_the_last_stops() -> None:
    before = gc.get_threshold()
    a, b = GcPolicy(gen0=20_000, warmup_s=3600.0), GcPolicy(gen0=20_000, warmup_s=3600.0)
    ta, tb = asyncio.create_task(a.run()), asyncio.create_task(b.run())
    await eventually(lambda: gc.get_threshold()[0] == 20_000, what="threshold raised")
    ta.cancel()
    await asyncio.gather(ta, return_exceptions=True)
    assert gc.get_threshold()[0] == 20_000  # b still runs
    tb.cancel()
    await asyncio.gather(tb, return_exceptions=True)
    assert gc.get_threshold() == before


def test_a_refresh_frees_cyclic_garbage_that_was_frozen() -> None:
    class Node:
        other: object = None

    policy = GcPolicy()
    x, y = Node(), Node()
    x.other, y.other = y, x
    policy.settle()  # the cycle is alive: frozen
    frozen = gc.get_freeze_count()
    del x, y  # now cyclic garbage inside the frozen set
    policy.settle()  # unfreeze, collect, freeze
    try:
        assert gc.get_freeze_count() < frozen
    finally:
        gc.unfreeze()


async def test_off_by_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FLEETGATE_GC_TUNING", "0")
    before = gc.get_threshold()
    task = asyncio.create_task(GcPolicy(gen0=30_000, warmup_s=0.0).run())
    await asyncio.sleep(0)
    assert gc.get_threshold() == before
    task.cancel()
    await asyncio.gather(task, return_exceptions=True)


def test_every_server_loop_runs_the_policy_unless_told_not_to() -> None:
    """`common.runloop.run` starts the policy beside the server's main coroutine (gateway, workers,
    router); a caller that compares collector settings itself passes `gc_policy=False`."""
    from common import runloop

    before = gc.get_threshold()

    async def threshold_inside() -> tuple[int, int, int]:
        await asyncio.sleep(0)  # the policy task has started
        return gc.get_threshold()

    assert runloop.run(threshold_inside(), gc_policy=False) == before
    inside = runloop.run(threshold_inside())
    assert inside[0] == max(before[0], GEN0)
    assert gc.get_threshold() == before  # restored when the server's loop ends
