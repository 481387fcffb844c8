"""Admission: hold requests in a bounded FIFO while every candidate pod is saturated, then shed.

Queueing in the gateway instead of on a saturated pod keeps requests routable: when capacity
frees up anywhere, the waiting request is scheduled afresh and goes to whichever pod has room.
Waiters re-check on `notify()` (a request finished, a scrape landed). Only the oldest waiter per
model is woken, so a completion costs a handful of `schedule()` calls, not one per queued request,
and a model whose pods are full does not block waiters for another model.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Generic, TypeVar

from common.errors import OpenAIError, rate_limited

R = TypeVar("R")

_WAKE_MAX_MODELS = 16  # distinct models woken per notify(); bounds the cost of one wake-up


@dataclass(eq=False, slots=True)
class _Waiter:
    model: str
    sheddable: bool
    wake: asyncio.Event = field(default_factory=asyncio.Event)
    displaced: bool = False


class AdmissionQueue(Generic[R]):
    """A bounded FIFO of requests waiting for a non-saturated pick."""

    def __init__(self, size: int, timeout_s: float) -> None:
        self.size = size
        self.timeout_s = timeout_s
        self._q: deque[_Waiter] = deque()

    def __len__(self) -> int:
        return len(self._q)

    def depth_by_model(self) -> dict[str, int]:
        """Waiting requests per requested model name (a base model or an adapter): a read-only view
        for the capacity agent, whose reports must count requests held here, not only on the pods."""
        depth: dict[str, int] = {}
        for w in self._q:
            depth[w.model] = depth.get(w.model, 0) + 1
        return depth

    def _shed(self, why: str) -> OpenAIError:
        retry = max(1.0, min(self.timeout_s, 30.0))
        return rate_limited(f"All model servers are saturated ({why}); retry later.", retry_after_s=retry)

    async def admit(
        self,
        model: str,
        try_schedule: Callable[[], R],
        is_saturated: Callable[[R], bool],
        is_sheddable: Callable[[R], bool],
    ) -> R:
        """Return a non-saturated schedule result, waiting in the queue if needed; raise 429 to shed.

        `try_schedule` may raise (404/503 OpenAIError); that propagates unchanged, also while queued.
        """
        result = try_schedule()
        if not is_saturated(result):
            return result
        waiter = self._enqueue(model, is_sheddable(result))
        deadline = time.monotonic() + self.timeout_s
        try:
            while True:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    raise self._shed("queue wait timed out")
                try:
                    await asyncio.wait_for(waiter.wake.wait(), remaining)
                except TimeoutError:
                    raise self._shed("queue wait timed out") from None
                if waiter.displaced:
                    raise self._shed("queue full; displaced by a non-sheddable request")
                waiter.wake.clear()
                result = try_schedule()
                if not is_saturated(result):
                    return result
        finally:
            self._remove(waiter)
            # Whoever is now first for this model gets its turn to re-check.
            self._wake_first(model)

    def _enqueue(self, model: str, sheddable: bool) -> _Waiter:
        if self.size <= 0:
            raise self._shed("no admission queue")
        if len(self._q) >= self.size:
            if sheddable:
                raise self._shed("queue full")
            victim = next((w for w in reversed(self._q) if w.sheddable), None)
            if victim is None:
                raise self._shed("queue full")
            victim.displaced = True
            victim.wake.set()
            self._q.remove(victim)
        waiter = _Waiter(model, sheddable)
        self._q.append(waiter)
        return waiter

    def _remove(self, waiter: _Waiter) -> None:
        with contextlib.suppress(ValueError):  # already displaced
            self._q.remove(waiter)

    def _wake_first(self, model: str) -> None:
        for w in self._q:
            if w.model == model:
                w.wake.set()
                return

    def notify(self) -> None:
        """Capacity may have changed: let the oldest waiter of each model re-check."""
        if not self._q:
            return
        seen: set[str] = set()
        for w in self._q:
            if w.model not in seen:
                seen.add(w.model)
                w.wake.set()
                if len(seen) >= _WAKE_MAX_MODELS:
                    return
