"""CPU time one coroutine spends, across its suspensions, on a loop shared with everything else.

The scrape budget needs what a scrape costs, not what the whole process costs (the request path
shares the loop). Driving the scrape's coroutine step by step and reading the thread's CPU clock
around each step counts exactly its own code: building the request, parsing the response head and
body, mapping the sample, writing the pool. Not counted: the loop's own wake-ups and socket reads
that hand it the bytes (a few µs per scrape; `bench/scale_scrape.py` compares the two).
"""

from __future__ import annotations

import time
from collections.abc import Coroutine, Generator
from typing import Any, Generic, TypeVar

__all__ = ["Metered"]

T = TypeVar("T")


class Metered(Generic[T]):
    """`await Metered(coro)` runs `coro`; afterwards `cpu_s` holds its thread-CPU seconds."""

    __slots__ = ("_coro", "cpu_s")

    def __init__(self, coro: Coroutine[Any, Any, T]) -> None:
        self._coro = coro
        self.cpu_s = 0.0

    def __await__(self) -> Generator[Any, Any, T]:
        coro = self._coro
        clock = time.thread_time
        value: Any = None
        error: BaseException | None = None
        while True:
            start = clock()
            try:
                yielded = coro.send(value) if error is None else coro.throw(error)
            except StopIteration as stop:
                self.cpu_s += clock() - start
                return stop.value  # type: ignore[no-any-return]
            except BaseException:
                self.cpu_s += clock() - start
                raise
            self.cpu_s += clock() - start
            try:
                value, error = (yield yielded), None
            except GeneratorExit:
                coro.close()
                raise
            except BaseException as exc:  # cancellation and the like: the coroutine handles them
                value, error = None, exc
