"""Router replicas announce themselves in Redis, so each knows how many share the limits.

The local rate-limit fallback divides every limit by the number of live replicas (instead of a
fixed `localShare` that is wrong as soon as the replica count changes: half of the limit is too
little for a lone replica and too much for four). Each replica refreshes its entry in one sorted
set every `replicaTtlS / 3` (score = expiry by Redis time); entries of replicas that stopped
refreshing lapse after `replicaTtlS`. The last count seen is kept through a Redis outage — that is
when the fallback needs it.
"""

from __future__ import annotations

import asyncio
import logging

import redis.asyncio as aioredis
from redis.exceptions import RedisError

from global_router.fleet_view import _reraise_if_cancelled
from global_router.lua_script import LuaScript

log = logging.getLogger(__name__)


class ReplicaRegistry:
    def __init__(
        self, client: aioredis.Redis, *, key: str, replica_id: str, ttl_s: float, timeout_s: float
    ) -> None:
        self._client = client
        self._key = key
        self.replica_id = replica_id
        self._ttl_ms = int(ttl_s * 1000)
        self._interval_s = max(0.2, ttl_s / 3)
        self._timeout_s = timeout_s
        self._script = LuaScript("announce")
        self.live: int | None = None  # None until the first announcement answered

    def share(self, default: float) -> float:
        """This replica's share of each limit on the fallback: 1 / live replicas (or `default`)."""
        return default if not self.live else 1.0 / self.live

    async def announce(self) -> int | None:
        try:
            async with asyncio.timeout(self._timeout_s):
                n = int(await self._script(self._client, [self._key], [self.replica_id, self._ttl_ms]))
        except (RedisError, OSError, TimeoutError) as exc:
            _reraise_if_cancelled()
            log.debug("replica announcement failed: %s", type(exc).__name__)
            return None
        if n != self.live:
            log.info("rate limiter: %d live router replica(s) share the limits", n)
        self.live = n
        return n

    async def withdraw(self) -> None:
        """Leave the set at a clean stop, so the others' share grows at once."""
        try:
            async with asyncio.timeout(self._timeout_s):
                await self._client.zrem(self._key, self.replica_id)
        except (RedisError, OSError, TimeoutError):
            _reraise_if_cancelled()

    async def run(self) -> None:
        while True:
            await self.announce()
            await asyncio.sleep(self._interval_s)
