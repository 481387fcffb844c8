"""`GET /ready`: whether this replica should receive traffic, separate from `/health` (liveness).

Ready means the router can route — at least one known (fresh or stale), non-draining cluster with
ready pods — and, when Redis is configured, Redis has answered since start. The Redis condition is a
start-up gate only (latched): once a replica has served, a Redis outage must not mark every replica
unready at once, or the load balancer would drop the whole global endpoint exactly when `failMode:
open` is meant to keep it serving. Losing every cluster, on the other hand, does make it unready.
A replica that is draining (SIGTERM, docs/drain.md) is unready while it finishes its requests.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable
from typing import Any

from global_router.fleet_view import FleetView
from global_router.selection import ClusterSelector

RedisPing = Callable[[], Awaitable[Any]]


class Readiness:
    def __init__(
        self,
        fleet: FleetView,
        selector: ClusterSelector,
        redis_ping: RedisPing | None = None,
        *,
        ping_timeout_s: float = 0.5,
    ) -> None:
        self._fleet = fleet
        self._selector = selector
        self._ping = redis_ping
        self._ping_timeout_s = ping_timeout_s
        self._redis_seen = redis_ping is None
        self.draining = False

    async def check(self) -> tuple[bool, dict[str, Any]]:
        """(ready, details for the response body)."""
        routable = self._selector.routable(self._fleet.snapshot())
        if not self._redis_seen and self._ping is not None:
            with contextlib.suppress(Exception):
                async with asyncio.timeout(self._ping_timeout_s):
                    await self._ping()
                self._redis_seen = True
        ready = routable > 0 and self._redis_seen and not self.draining
        detail: dict[str, Any] = {"ready": ready, "routable_clusters": routable}
        if self.draining:
            detail["draining"] = True
        if self._ping is not None:
            detail["redis_answered"] = self._redis_seen
        return ready, detail
