"""run_until_disconnect: both tiers rely on it to cancel upstream work the moment a client leaves.

Every test runs twice: with the departure reported by the server's `DisconnectHook` (how both tiers'
own server tells it, with no task per request) and by `receive()` returning `http.disconnect` to a
watcher task (any other ASGI server)."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from common.asgi import run_until_disconnect
from common.disconnect_hook import DISCONNECT_HOOK, DisconnectHook
from common.http import Message


class Client:
    """A client that leaves when `leave()` is called, told through `receive` or through `hook`."""

    def __init__(self, via_hook: bool) -> None:
        self._gone = asyncio.Event()
        self.hook = DisconnectHook() if via_hook else None

    def leave(self) -> None:
        self._gone.set()
        if self.hook is not None:
            self.hook.fire()

    async def receive(self) -> Message:
        assert self.hook is None, "with a hook, nothing waits in receive()"
        await self._gone.wait()
        return {"type": "http.disconnect"}

    def channel(self) -> dict[str, Any]:
        """`run_until_disconnect`'s arguments after `work`: the scope carries the hook, as our server's does."""
        scope = {"extensions": {DISCONNECT_HOOK: self.hook}} if self.hook is not None else {}
        return {"scope": scope, "receive": self.receive}


@pytest.fixture(params=["hook", "receive"])
def via_hook(request: pytest.FixtureRequest) -> bool:
    return bool(request.param == "hook")


async def _sleep_until_cancelled(cancelled: asyncio.Event) -> None:
    try:
        await asyncio.sleep(30)
    except asyncio.CancelledError:
        cancelled.set()
        raise


async def test_work_that_ends_first_runs_to_completion(via_hook: bool) -> None:
    done: list[str] = []

    async def work() -> None:
        await asyncio.sleep(0)
        done.append("sent")

    assert await run_until_disconnect(work(), **Client(via_hook).channel()) is False
    assert done == ["sent"]


async def test_the_works_error_reaches_the_caller(via_hook: bool) -> None:
    async def work() -> None:
        raise OSError("client socket closed")

    with pytest.raises(OSError, match="client socket closed"):
        await run_until_disconnect(work(), **Client(via_hook).channel())


async def test_a_departure_cancels_the_work(via_hook: bool) -> None:
    client = Client(via_hook)
    cancelled = asyncio.Event()

    async def work() -> None:
        client.leave()
        await _sleep_until_cancelled(cancelled)

    assert await asyncio.wait_for(run_until_disconnect(work(), **client.channel()), 5) is True
    assert cancelled.is_set()


async def test_an_error_while_cancelling_still_reaches_the_caller(via_hook: bool) -> None:
    client = Client(via_hook)

    async def work() -> None:
        client.leave()
        try:
            await asyncio.sleep(30)
        finally:
            raise OSError("write after close")

    with pytest.raises(OSError, match="write after close"):
        await asyncio.wait_for(run_until_disconnect(work(), **client.channel()), 5)


async def test_a_finished_response_is_not_cancelled_when_the_client_closes(via_hook: bool) -> None:
    client = Client(via_hook)
    finished = False
    tail: list[str] = []

    async def work() -> None:
        nonlocal finished
        finished = True  # the last body chunk went out
        client.leave()
        await asyncio.sleep(0.05)  # bookkeeping after the response
        tail.append("recorded")

    left = await asyncio.wait_for(
        run_until_disconnect(work(), finished=lambda: finished, **client.channel()), 5
    )
    assert left is False
    assert tail == ["recorded"]


async def test_cancelling_the_caller_cancels_the_work(via_hook: bool) -> None:
    started = asyncio.Event()
    cancelled = asyncio.Event()

    async def work() -> None:
        started.set()
        await _sleep_until_cancelled(cancelled)

    caller = asyncio.ensure_future(run_until_disconnect(work(), **Client(via_hook).channel()))
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

    assert await run_until_disconnect(_sleep_until_cancelled(cancelled), {}, broken_receive) is True
    assert cancelled.is_set()


async def test_a_client_gone_before_the_work_starts_cancels_it_at_once() -> None:
    hook = DisconnectHook()
    hook.fire()  # the connection closed while the request was still being read
    cancelled = asyncio.Event()
    scope = {"extensions": {DISCONNECT_HOOK: hook}}
    assert await run_until_disconnect(_sleep_until_cancelled(cancelled), scope, Client(False).receive)
    assert cancelled.is_set()


async def test_the_hook_forgets_the_task_once_the_work_ended() -> None:
    client = Client(True)

    async def work() -> None:
        await asyncio.sleep(0)

    assert await run_until_disconnect(work(), **client.channel()) is False
    client.leave()  # the connection closes after the response: nothing is cancelled
    await asyncio.sleep(0)  # a cancel of this task, had the hook kept it, would land here
    assert client.hook is not None and client.hook.fired
