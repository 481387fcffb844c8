"""Injectable faults for one pod, as set by `POST /admin/faults`, the fleet API or CLI flags."""

from __future__ import annotations

import asyncio
import random
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

MODES = ("none", "crash", "hang", "slow", "error", "429", "stale")


class FaultError(ValueError):
    """A bad fault request; the message names the parameter."""


@dataclass
class FaultState:
    seed: int = 0
    mode: str = "none"
    params: dict[str, Any] = field(default_factory=dict)
    rate: float = 1.0  # error / 429: fraction of inference requests that fail
    status: int = 500  # error: the HTTP status
    factor: float = 4.0  # slow: step-time multiplier
    retry_after_s: float = 1.0  # 429
    duration_s: float | None = None  # any mode: clear itself after this long
    frozen_metrics: str | None = None  # stale: the body /metrics keeps returning
    _rng: random.Random = field(init=False)
    _timer: asyncio.TimerHandle | None = field(default=None, init=False)
    _cleared: asyncio.Event | None = field(default=None, init=False)

    def __post_init__(self) -> None:
        self._rng = random.Random(self.seed ^ 0x5EED)

    @staticmethod
    def parse(mode: Any, params: dict[str, Any]) -> dict[str, Any]:
        """Validate a fault request into keyword values; raises FaultError naming the field."""
        if mode not in MODES:
            raise FaultError(f"mode: must be one of {', '.join(MODES)} (got {mode!r})")
        out: dict[str, Any] = {"mode": mode}
        known = {"rate", "status", "factor", "retry_after_s", "duration_s"}
        for k in params:
            if k not in known:
                raise FaultError(f"{k}: unknown fault parameter (known: {', '.join(sorted(known))})")

        def num(k: str, lo: float, hi: float) -> float | None:
            v = params.get(k)
            if v is None:
                return None
            if isinstance(v, bool) or not isinstance(v, int | float) or not lo <= float(v) <= hi:
                raise FaultError(f"{k}: must be a number in [{lo}, {hi}] (got {v!r})")
            return float(v)

        for k, lo, hi in (
            ("rate", 0, 1),
            ("factor", 1e-3, 1e6),
            ("retry_after_s", 0, 3600),
            ("duration_s", 0, 86400),
        ):
            v = num(k, lo, hi)
            if v is not None:
                out[k] = v
        st = params.get("status")
        if st is not None:
            if isinstance(st, bool) or not isinstance(st, int) or not 500 <= st <= 599:
                raise FaultError(f"status: must be an integer 500..599 (got {st!r})")
            out["status"] = st
        return out

    def apply(self, values: dict[str, Any], on_expire: Callable[[], None] | None = None) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        prev = self.mode
        self.mode = values["mode"]
        self.params = {k: v for k, v in values.items() if k != "mode"}
        self.rate = float(values.get("rate", 1.0))
        self.status = int(values.get("status", 500))
        self.factor = float(values.get("factor", 4.0))
        self.retry_after_s = float(values.get("retry_after_s", 1.0))
        self.duration_s = values.get("duration_s")
        if self.mode != "stale":
            self.frozen_metrics = None
        if prev == "hang" and self.mode != "hang" and self._cleared is not None:
            self._cleared.set()
            self._cleared = None
        if self.duration_s is not None and self.mode != "none" and on_expire is not None:
            self._timer = asyncio.get_running_loop().call_later(self.duration_s, on_expire)

    def hit(self) -> bool:
        """For error/429: does this request fail? Seeded, so a run is reproducible."""
        return self._rng.random() < self.rate

    async def wait_unhung(self) -> None:
        if self.mode != "hang":
            return
        if self._cleared is None:
            self._cleared = asyncio.Event()
        await self._cleared.wait()

    def describe(self) -> dict[str, Any]:
        return {"mode": self.mode, **self.params}
