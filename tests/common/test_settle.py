"""settle: every stop runs to its end, and failures are raised afterwards."""

from __future__ import annotations

import asyncio

import pytest

from common.settle import settle


async def test_a_failing_stop_does_not_cut_the_other_short() -> None:
    finished: list[str] = []
    failed, release = asyncio.Event(), asyncio.Event()

    async def fails() -> None:
        failed.set()
        raise RuntimeError("boom")

    async def drains() -> None:
        await release.wait()  # still draining when the other has failed
        finished.append("drained")

    task = asyncio.ensure_future(settle(fails(), drains()))
    await failed.wait()
    for _ in range(5):  # time for a plain gather to hand the failure to its caller
        await asyncio.sleep(0)
    assert not task.done()
    release.set()
    with pytest.raises(RuntimeError, match="boom"):
        await task
    assert finished == ["drained"]


async def test_several_failures_come_back_together_and_none_is_quiet() -> None:
    async def fails(n: int) -> None:
        raise ValueError(n)

    with pytest.raises(BaseExceptionGroup) as group:
        await settle(fails(1), fails(2))
    assert sorted(e.args[0] for e in group.value.exceptions) == [1, 2]
    await settle()  # nothing to stop
