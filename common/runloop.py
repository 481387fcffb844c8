"""Run a server's main coroutine on uvloop when it is installed (the default install has it).

uvicorn's `loop="auto"` never installs uvloop when the caller already runs `asyncio.run()`, which
is how every Fleetgate server starts, so the choice is made here, once, for all of them.
`FLEETGATE_UVLOOP=0` keeps the standard asyncio loop (for debugging or comparison).
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Coroutine
from typing import Any, TypeVar

T = TypeVar("T")


def run(main: Coroutine[Any, Any, T]) -> T:
    if os.environ.get("FLEETGATE_UVLOOP", "1") != "0":
        try:
            import uvloop
        except ImportError:
            pass
        else:
            return uvloop.run(main)
    return asyncio.run(main)
