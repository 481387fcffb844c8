"""Await several stops to the end even when one of them fails.

Both tiers stop their worker processes and their own server together (one after the other, a stop
could take two drain timeouts). `asyncio.gather` would raise the first failure at once and leave
the other stop running with nobody awaiting it, and the caller's cleanup after it would be
skipped; a `TaskGroup` would cancel the other stop mid-drain. `settle` lets every stop finish, then
raises what failed.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable


async def settle(*stops: Awaitable[object]) -> None:
    """Await all of `stops`; then raise the one failure, or an ExceptionGroup of several."""
    results = await asyncio.gather(*stops, return_exceptions=True)
    errors = [r for r in results if isinstance(r, BaseException)]
    if len(errors) == 1:
        raise errors[0]
    if errors:
        raise BaseExceptionGroup("several stops failed", errors)
