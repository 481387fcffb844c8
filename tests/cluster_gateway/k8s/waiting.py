"""Polling helper for asserting that something happens within a deadline."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable


async def eventually(condition: Callable[[], bool], within: float = 1.0, what: str = "condition") -> float:
    """Wait until `condition()` holds; return how long it took, fail the test after `within` seconds."""
    start = time.monotonic()
    while not condition():
        if time.monotonic() - start > within:
            raise AssertionError(f"{what} did not happen within {within}s")
        await asyncio.sleep(0.005)
    return time.monotonic() - start
