"""run_until_disconnect: both tiers rely on it to cancel upstream work the moment a client leaves."""

from __future__ import annotations

import asyncio

import pytest

from common.asgi import run_until_disconnect
from common.http import Message


class Client:
    """An ASGI receive channel that reports `http.disconnect` once `leave()` is called."""

    def __init__(self) -> None:
        self._gone = asyncio.Event()

    def leave(self) -> None:
        self._gone.set()

    async def receive(self) -> Message:
        await self._gone.wait()
        return {"type": "http.disconnect"}


async def _sleep_until_cancelled(cancelled: asyncio.Event) -> None:
    try:
        await asyncio.sleep(30)
    except asyncio.CancelledError:
        cancelled.set()
        raise


async def test_work_that_ends_first_runs_to_completion() -> None:
    done: list[str] = []

    async def work() -> None:
        await asyncio.sleep(0)
        done.append("sent")

    assert await run_until_disconnect(work(), Client().receive) is False
    assert done == ["sent"]


async def test_the_works_error_reaches_the_caller() -> None:
    async def work() -> None:
        raise OSError("client socket closed")

    with pytest.raises(OSError, match="client socket closed"):
        await run_until_disconnect(work(), Client().receive)


async def test_a_departure_cancels_the_work() -> None:
    client = Client()
    cancelled = asyncio.Event()

    async def work() -> None:
        client.leave()
        await _sleep_until_cancelled(cancelled)

    assert await asyncio.wait_for(run_until_disconnect(work(), client.receive), 5) is True
    assert cancelled.is_set()


async def test_an_error_while_cancelling_still_reaches_the_caller() -> None:
    client = Client()

    async def work() -> None:
        client.leave()
        try:
            await asyncio.sleep(30)
        finally:
            raise OSError("write after close")

    with pytest.raises(OSError, match="write after close"):
        await asyncio.wait_for(run_until_disconnect(work(), client.receive), 5)


async def test_a_finished_response_is_not_cancelled_when_the_client_closes() -> None:
    client = Client()
    finished = False
    tail: list[str] = []

    async def work() -> None:
        nonlocal finished
        finished = True  # the last body chunk went out
        client.leave()
        await asyncio.sleep(0.05)  # bookkeeping after the response
        tail.append("recorded")

    left = await asyncio.wait_for(run_until_disconnect(work(), client.receive, lambda: finished), 5)
    assert left is False
    assert tail == ["recorded"]


async def test_cancelling_the_caller_cancels_the_work() -> None:
    started = asyncio.Event()
    cancelled = asyncio.Event()

    async def work() -> None:
        started.set()
        await _sleep_until_cancelled(cancelled)

    caller = asyncio.ensure_future(run_until_disconnect(work(), Client().receive))
    await started.wait()
    caller.cancel()
    with pytest.raises(asyncio.CancelledError):
        await caller
    await asyncio.sleep(0)
    assert cancelled.is_set()


async def test_a_failing_watcher_counts_as_a_departure() -> None:
    cancelled = asyncio.Event()

    async def broken_receive() -> Message:
        raise RuntimeError("receive channel broke")

    assert await run_until_disconnect(_sleep_until_cancelled(cancelled), broken_receive) is True
    assert cancelled.is_set()
