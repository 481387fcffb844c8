"""Run an async test on asyncio's loop and on uvloop's: both tiers serve on uvloop, whose
transports are no `asyncio.Transport` subclass, while tests and other embedders may use asyncio's."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Coroutine
from typing import Any

import pytest
import uvloop

LOOPS: dict[str, Callable[[], asyncio.AbstractEventLoop]] = {
    "asyncio": asyncio.new_event_loop,
    "uvloop": uvloop.new_event_loop,
}


def on_both_loops(test: Callable[[], Coroutine[Any, Any, None]]) -> Callable[[str], None]:
    """The test, parametrized over `LOOPS`, each run in a fresh `asyncio.Runner`."""

    @pytest.mark.parametrize("loop", sorted(LOOPS))
    def run(loop: str) -> None:
        with asyncio.Runner(loop_factory=LOOPS[loop]) as runner:
            runner.run(test())

    run.__name__, run.__doc__ = test.__name__, test.__doc__
    return run
