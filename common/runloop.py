"""Run a server's main coroutine on uvloop when it is installed (the default install has it).

uvicorn's `loop="auto"` never installs uvloop when the caller already runs `asyncio.run()`, which
is how every Fleetgate server starts, so the choice is made here, once, for all of them.
`FLEETGATE_UVLOOP=0` keeps the standard asyncio loop (for debugging or comparison).
The garbage collector is tuned here too, for the same reason (`gc_tuning.py`).
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Coroutine
from typing import Any, TypeVar

from common import gc_tuning

T = TypeVar("T")


def run(main: Coroutine[Any, Any, T]) -> T:
    gc_tuning.tune_for_serving()  # every import is done: start-up's objects are frozen
    if os.environ.get("FLEETGATE_UVLOOP", "1") != "0":
        try:
            import uvloop
        except ImportError:
            pass
        else:
            return uvloop.run(main)
    return asyncio.run(main)
