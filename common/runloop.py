"""Run a server's main coroutine on uvloop when it is installed (the default install has it), with
the servers' garbage-collector policy beside it.

uvicorn's `loop="auto"` never installs uvloop when the caller already runs `asyncio.run()`, which
is how every Fleetgate server starts, so the choice is made here, once, for all of them.
`FLEETGATE_UVLOOP=0` keeps the standard asyncio loop (for debugging or comparison).

The GC policy (`gc_policy.py`) runs here for the same reason: every server process — gateway,
its worker processes, router and its workers — has the request path's allocation shape, and
in-process embeddings (tests, the bench) keep the interpreter's settings.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
from collections.abc import Coroutine
from typing import Any, TypeVar

from common.gc_policy import GcPolicy

T = TypeVar("T")


async def _with_gc_policy(main: Coroutine[Any, Any, T]) -> T:
    policy = asyncio.ensure_future(GcPolicy().run())
    try:
        return await main
    finally:
        policy.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await policy


def run(main: Coroutine[Any, Any, T], *, gc_policy: bool = True) -> T:
    """`gc_policy` False: the caller manages the collector itself (a bench comparing settings)."""
    wrapped = _with_gc_policy(main) if gc_policy else main
    if os.environ.get("FLEETGATE_UVLOOP", "1") != "0":
        try:
            import uvloop
        except ImportError:
            pass
        else:
            return uvloop.run(wrapped)
    return asyncio.run(wrapped)
