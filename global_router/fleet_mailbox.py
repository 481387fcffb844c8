"""Capacity reports handed from the control thread to the data loop's fleet view.

The capacity server runs on its own loop (`common/control_thread.py`) and must never wait on the
data loop: a report is posted here and the directive goes back at once. The data loop applies
posted states in arrival order, one cluster's latest state replacing an older one not yet applied
(a busy loop catches up on the newest figures, not on a backlog). A report's freshness is the time
the control thread received it, so a slow data loop delays, but never ages, the figures.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading

from global_router.fleet_view import ClusterState, FleetView

log = logging.getLogger(__name__)


class FleetMailbox:
    """The two fleet-view calls the capacity server makes, safe from the control thread."""

    def __init__(self, fleet: FleetView, loop: asyncio.AbstractEventLoop) -> None:
        self._fleet = fleet
        self._loop = loop
        self._lock = threading.Lock()
        self._pending: dict[str, ClusterState] = {}
        self._wake = asyncio.Event()  # set on the data loop only
        self._task: asyncio.Task[None] | None = None
        self.applied = 0

    def start(self) -> None:
        """On the data loop: begin applying posted states."""
        self._task = self._loop.create_task(self._apply_loop(), name="fleet-mailbox")

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None
        await self._apply_pending()  # what arrived before stop is not lost

    async def publish(self, state: ClusterState) -> None:
        """From the control thread: post `state`; returns without waiting for the data loop."""
        with self._lock:
            first = not self._pending
            self._pending[state.cluster_id] = state  # a newer report replaces one not yet applied
        if first:
            self._loop.call_soon_threadsafe(self._wake.set)

    def router_drained(self, cluster_id: str) -> bool:
        # a set lookup on the fleet view's cache: atomic under the GIL, never awaits the data loop
        return self._fleet.router_drained(cluster_id)

    async def _apply_pending(self) -> None:
        with self._lock:
            batch, self._pending = self._pending, {}
        for state in batch.values():
            try:
                await self._fleet.publish(state)
                self.applied += 1
            except Exception:  # one bad publish must not stop the mailbox
                log.exception("fleet mailbox: publishing cluster %r failed", state.cluster_id)

    async def _apply_loop(self) -> None:
        while True:
            await self._wake.wait()
            self._wake.clear()
            await self._apply_pending()
