"""The one polling helper: wait for a condition with a deadline (never a fixed sleep as synchronisation).

Fleetgate's state changes (a scrape landed, a report arrived, a pod started) mostly have no event a
test could await, so tests poll. `eventually` is for async tests, `eventually_sync` for tests that
drive real processes from plain code. Both return the seconds the condition took and fail the test
with `what` in the message when `within` seconds pass first.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable


async def eventually(
    condition: Callable[[], object], within: float = 5.0, what: str = "condition", interval: float = 0.01
) -> float:
    start = time.monotonic()
    while not condition():
        if time.monotonic() - start > within:
            raise AssertionError(f"{what} did not happen within {within}s")
        await asyncio.sleep(interval)
    return time.monotonic() - start


def eventually_sync(
    condition: Callable[[], object], within: float = 5.0, what: str = "condition", interval: float = 0.02
) -> float:
    start = time.monotonic()
    while not condition():
        if time.monotonic() - start > within:
            raise AssertionError(f"{what} did not happen within {within}s")
        time.sleep(interval)
    return time.monotonic() - start
