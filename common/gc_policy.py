"""Garbage-collector settings for a long-running asyncio server: no full collection every second.

Measured with one scraper keeping 1,000 pods at 100 ms (`bench/scale_scrape.py`): with CPython's
default thresholds (700, 10, 10) a full collection ran every ~0.6 s and stopped the event loop for
50-90 ms each time (on a quiet machine; about twice that on a loaded one, which is what left half
the pods older than 2 x the interval at some instants). The cause is the shape of the work, not a
leak: every in-flight scrape's task, future and buffers are alive when a young collection runs, so
they are promoted, then die in the old generation, whose pending count soon trips a collection of
the whole heap (~180k objects: the pool, the per-pod line memos, the registries). The request path
has the same shape. Two changes:

- a larger first threshold (`GEN0`), so a young collection mostly meets objects that are already
  dead and promotes little: no full collection at all in the same 1,000-pod run;
- `gc.freeze()` once the server is warm (`WARMUP_S`: pods discovered and scraped), so a full
  collection, when one comes, walks only what was allocated since (5-9 ms instead of 50-90 ms).

Frozen objects are still freed by reference counting; only cyclic garbage among them waits until
the next refresh (every `REFRESH_S`: unfreeze, one full collection, freeze again; that one pause is
the old cost, once every 10 minutes instead of every 0.6 s). `FLEETGATE_GC_TUNING=0` leaves the
interpreter's defaults. Process-global: the first running policy sets it, the last to stop restores.
"""

from __future__ import annotations

import asyncio
import gc
import logging
import os

__all__ = ["GEN0", "REFRESH_S", "WARMUP_S", "GcPolicy"]

log = logging.getLogger(__name__)

GEN0 = 10_000  # allocations minus deallocations between young collections (CPython's default: 700)
WARMUP_S = 5.0  # after start: discovery has listed the pods and each was scraped (first freeze)
REFRESH_S = 600.0  # unfreeze, collect, freeze again: cyclic garbage among frozen objects is freed

_active = 0
_saved: tuple[int, int, int] | None = None


class GcPolicy:
    """`await GcPolicy().run()` for the server's lifetime (a background task; cancel to stop)."""

    def __init__(self, *, gen0: int = GEN0, warmup_s: float = WARMUP_S, refresh_s: float = REFRESH_S) -> None:
        self.gen0 = gen0
        self.warmup_s = warmup_s
        self.refresh_s = refresh_s
        self.settled = 0  # freezes done (tests wait on it)

    @staticmethod
    def enabled() -> bool:
        return os.environ.get("FLEETGATE_GC_TUNING", "1") != "0"

    async def run(self) -> None:
        if not self.enabled():
            await asyncio.Event().wait()
        _acquire(self.gen0)
        try:
            await asyncio.sleep(self.warmup_s)
            while True:
                self.settle()
                await asyncio.sleep(self.refresh_s)
        finally:
            _release()

    def settle(self) -> None:
        """Free what is garbage now, then move every surviving object out of the collector's walks."""
        gc.unfreeze()
        gc.collect()
        gc.freeze()
        self.settled += 1
        log.debug("gc: %d objects frozen", gc.get_freeze_count())


def _acquire(gen0: int) -> None:
    global _active, _saved
    if _active == 0:
        _saved = gc.get_threshold()
        gc.set_threshold(max(gen0, _saved[0]), _saved[1], _saved[2])
    _active += 1


def _release() -> None:
    global _active, _saved
    _active -= 1
    if _active == 0 and _saved is not None:
        gc.set_threshold(*_saved)
        _saved = None
        gc.unfreeze()
