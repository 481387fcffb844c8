"""One active report stream per cluster across router replicas: a short Redis lease per cluster.

Why: each replica refuses a second local stream for a cluster, but with several replicas behind one
load balancer a stolen agent token could open its stream on another replica and interleave reports
through the shared fleet view. The lease (`SET NX PX`, renewed by the holder on every report, TTL
`capacity.staleAfterS`) makes the first stream the only one fleet-wide; a silent holder's lease
expires and the next stream takes over, like the local rule. When Redis cannot answer, the lease
fails open (the local rule still holds): capacity reports must not stop because Redis is down.
"""

from __future__ import annotations

import asyncio
import logging

import redis.asyncio as aioredis

log = logging.getLogger("fleetgate.router.capacity")

# renew or release only what this stream holds
_RENEW = "if redis.call('get', KEYS[1]) == ARGV[1] then return redis.call('pexpire', KEYS[1], ARGV[2]) end return 0"
_RELEASE = "if redis.call('get', KEYS[1]) == ARGV[1] then return redis.call('del', KEYS[1]) end return 0"


class RedisStreamLease:
    def __init__(self, redis: aioredis.Redis, *, prefix: str, ttl_s: float, timeout_s: float) -> None:
        self._redis = redis
        self._prefix = prefix
        self._ttl_ms = max(1, int(ttl_s * 1000))
        self._timeout_s = timeout_s
        self._renew = redis.register_script(_RENEW)
        self._release = redis.register_script(_RELEASE)
        self._warned = False

    def _key(self, cluster_id: str) -> str:
        return f"{self._prefix}stream:{cluster_id}"

    def _failed(self, what: str, exc: Exception) -> None:
        if not self._warned:
            log.warning(
                "capacity: stream lease %s failed (%s); one-stream rule is per replica meanwhile", what, exc
            )
            self._warned = True

    async def acquire(self, cluster_id: str, stream_id: str) -> bool:
        """True when this stream now holds the cluster's lease (or Redis cannot tell)."""
        try:
            async with asyncio.timeout(self._timeout_s):
                ok = await self._redis.set(self._key(cluster_id), stream_id, nx=True, px=self._ttl_ms)
        except Exception as exc:  # Redis down or slow: fail open
            self._failed("acquire", exc)
            return True
        self._warned = False
        return bool(ok)

    async def renew(self, cluster_id: str, stream_id: str) -> bool:
        """False when another stream holds the lease (this one went silent and was taken over)."""
        try:
            async with asyncio.timeout(self._timeout_s):
                held = await self._renew(keys=[self._key(cluster_id)], args=[stream_id, self._ttl_ms])
        except Exception as exc:
            self._failed("renew", exc)
            return True
        if held:
            return True
        # expired without a new holder (e.g. Redis restarted): take it again if nobody else has
        return await self.acquire(cluster_id, stream_id)

    async def release(self, cluster_id: str, stream_id: str) -> None:
        try:
            async with asyncio.timeout(self._timeout_s):
                await self._release(keys=[self._key(cluster_id)], args=[stream_id])
        except Exception as exc:
            self._failed("release", exc)
