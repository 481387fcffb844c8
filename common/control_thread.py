"""A control plane on its own thread and event loop, so data traffic cannot starve it.

A saturated data plane keeps its event loop busy; timers and stream reads scheduled on the same
loop then run seconds late. A capacity stream that misses its cadence looks dead to the other
tier, which then forgets the cluster: overload turns into `model_not_found`. Running the control
streams on a loop of their own (the GIL still switches every few milliseconds) keeps them on time
however busy the data loop is. Work for the data loop crosses over through `MainLoopMailbox`
(`global_router/fleet_mailbox.py`), never by awaiting the busy loop.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import threading
from collections.abc import Coroutine
from typing import Any, TypeVar

T = TypeVar("T")


def _new_loop() -> asyncio.AbstractEventLoop:
    try:
        import uvloop
    except ImportError:
        return asyncio.new_event_loop()
    return uvloop.new_event_loop()


class ControlThread:
    """One daemon thread running one event loop until `stop()`."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.loop = _new_loop()
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self._started = False

    def _run(self) -> None:
        asyncio.set_event_loop(self.loop)
        self.loop.run_forever()
        # stop() has let every task it ran finish; close what the loop still holds
        self.loop.run_until_complete(self.loop.shutdown_asyncgens())
        self.loop.close()

    def start(self) -> None:
        if not self._started:
            self._started = True
            self._thread.start()

    def submit(self, coro: Coroutine[Any, Any, T]) -> concurrent.futures.Future[T]:
        """Run `coro` on the control loop (from any thread)."""
        return asyncio.run_coroutine_threadsafe(coro, self.loop)

    async def run(self, coro: Coroutine[Any, Any, T]) -> T:
        """Run `coro` on the control loop and await its result from another loop."""
        return await asyncio.wrap_future(self.submit(coro))

    def stop(self, timeout_s: float = 5.0) -> None:
        if not self._started or not self._thread.is_alive():
            return
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join(timeout_s)

    @property
    def alive(self) -> bool:
        return self._thread.is_alive()
