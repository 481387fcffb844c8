"""Per-tenant rate limits: requests/min, tokens/min and concurrency, shared by every router replica.

Admission reserves the request's token estimate (prompt + max_tokens) and a concurrency lease in one
atomic Redis script; completion reconciles the reservation with the real usage and frees the lease.
Leases carry an expiry that the owning replica renews while the request runs, so a replica that
crashes leaks its slots only until the lease expires. When Redis is unreachable the limiter either
keeps enforcing a per-replica share of each limit in process (`failMode: open`) or refuses
(`closed`). Without Redis the in-process limiter is the whole story (one replica).
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import math
import time
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

import redis.asyncio as aioredis
from redis.exceptions import RedisError
from redis.exceptions import TimeoutError as RedisTimeout

from common.config.router import RateLimitSettings, RedisConfig, Tenant
from common.errors import OpenAIError, rate_limited
from global_router.fleet_view import _reraise_if_cancelled
from global_router.gcra import PERIOD_MS, Gcra, format_duration
from global_router.lua_script import LuaScript
from global_router.redis_guard import CircuitBreaker, LatencyTracker, Route
from global_router.replicas import ReplicaRegistry
from global_router.settlements import Settlements

log = logging.getLogger(__name__)

REASONS = {0: "ok", 1: "requests", 2: "tokens", 3: "concurrency"}


@dataclass(slots=True)
class Outcome:
    """One admission decision's numbers; -1 remaining = that limit is not set."""

    allowed: bool
    reason: str
    req_limit: int
    req_remaining: int
    req_reset_ms: float
    tok_limit: int
    tok_remaining: int
    tok_reset_ms: float
    retry_after_ms: float  # inf: the request can never fit (bigger than the token limit)

    def headers(self) -> dict[str, str]:
        h: dict[str, str] = {}
        if self.req_limit > 0:
            h["x-ratelimit-limit-requests"] = str(self.req_limit)
            h["x-ratelimit-remaining-requests"] = str(max(0, self.req_remaining))
            h["x-ratelimit-reset-requests"] = format_duration(self.req_reset_ms)
        if self.tok_limit > 0:
            h["x-ratelimit-limit-tokens"] = str(self.tok_limit)
            h["x-ratelimit-remaining-tokens"] = str(max(0, self.tok_remaining))
            h["x-ratelimit-reset-tokens"] = format_duration(self.tok_reset_ms)
        return h


@dataclass(slots=True)
class Admission:
    """An admitted request's reservation, handed back to `complete`."""

    tenant: Tenant
    reserved_tokens: int
    backend: str  # "redis" | "local": where the reservation lives
    headers: dict[str, str]
    lease_id: str = ""
    done: bool = field(default=False)


class RateLimiter(Protocol):
    async def start(self) -> None: ...
    async def stop(self) -> None: ...
    async def admit(self, tenant: Tenant, tokens: int) -> Admission: ...
    async def complete(self, admission: Admission, used_tokens: int) -> None: ...
    @property
    def mode(self) -> str: ...


def _refusal(out: Outcome, tenant: Tenant, tokens: int) -> OpenAIError:
    headers = out.headers()
    if math.isinf(out.retry_after_ms):
        return OpenAIError(
            429,
            f"Request too large for tenant `{tenant.name}`: it needs {tokens} tokens but the limit is "
            f"{out.tok_limit} tokens per minute. Lower max_tokens or shorten the prompt.",
            code="tokens_exceed_limit",
            headers=headers,
        )
    limit = {"requests": out.req_limit, "tokens": out.tok_limit}.get(out.reason)
    what = {
        "requests": f"{limit} requests per minute",
        "tokens": f"{limit} tokens per minute",
        "concurrency": f"{tenant.max_concurrency} concurrent requests",
    }[out.reason]
    retry_s = out.retry_after_ms / 1000.0
    headers["retry-after-ms"] = str(max(1, math.ceil(out.retry_after_ms)))
    return rate_limited(
        f"Rate limit reached for tenant `{tenant.name}`: {what}. Try again in {format_duration(out.retry_after_ms)}.",
        retry_after_s=retry_s,
        headers=headers,
    )


def _scaled(limit: int, share: float) -> int:
    return 0 if limit <= 0 else max(1, int(limit * share))


@dataclass(slots=True)
class Seen:
    """The last remaining budget Redis reported for a tenant, and when (the fallback's start)."""

    at_s: float  # limiter clock
    req_remaining: int  # -1: limit not set
    tok_remaining: int


class _TenantLocal:
    __slots__ = ("conc", "in_use", "rpm", "tpm")

    def __init__(self, rpm: int, tpm: int, conc: int) -> None:
        self.rpm = Gcra(rpm) if rpm > 0 else None
        self.tpm = Gcra(tpm) if tpm > 0 else None
        self.conc = conc
        self.in_use = 0


def _seed(g: Gcra | None, remaining: int, share: float, at_ms: float) -> None:
    """Start a fallback bucket where the shared one was: `remaining x share` left at `at_ms`."""
    if g is None or remaining < 0:
        return
    left = min(g.limit, int(remaining * share))
    g.tat = at_ms + g.period_ms - left * g.interval_ms


class LocalLimiter:
    """The same limits in process, each scaled by `share` (1.0 when this is the only replica).

    As Redis's fallback, `seed` starts a tenant's buckets from the budget Redis last reported (not
    full) and `inflight` counts the replica's own running requests, Redis-admitted ones included.
    """

    def __init__(
        self,
        share: float = 1.0,
        clock: Callable[[], float] = time.monotonic,
        inflight: Callable[[str], int] | None = None,
    ) -> None:
        self.share = share
        self._clock = clock
        self._inflight = inflight
        self._tenants: dict[str, _TenantLocal] = {}

    @property
    def mode(self) -> str:
        return "local"

    async def start(self) -> None:
        return None

    async def stop(self) -> None:
        return None

    def drop(self, tenant: Tenant) -> None:
        """Forget a tenant's buckets (they are seeded again from fresher knowledge)."""
        self._tenants.pop(tenant.name, None)

    def seed(self, tenant: Tenant, seen: Seen) -> None:
        """Start the tenant's buckets at `share` of what Redis last said was left."""
        st = self._state(tenant)
        at_ms = seen.at_s * 1000.0
        _seed(st.rpm, seen.req_remaining, self.share, at_ms)
        _seed(st.tpm, seen.tok_remaining, self.share, at_ms)

    def charge(self, tenant: Tenant, tokens: int) -> None:
        """Count an admission granted elsewhere (by Redis) against the tenant's local buckets."""
        st = self._tenants.get(tenant.name)
        if st is None:
            return
        now = self._clock() * 1000.0
        if st.rpm:
            st.rpm.commit(1, now)
        if st.tpm:
            st.tpm.commit(tokens, now)

    def has(self, tenant: Tenant) -> bool:
        return tenant.name in self._tenants

    def _state(self, tenant: Tenant) -> _TenantLocal:
        st = self._tenants.get(tenant.name)
        if st is None:
            st = _TenantLocal(
                _scaled(tenant.requests_per_minute, self.share),
                _scaled(tenant.tokens_per_minute, self.share),
                _scaled(tenant.max_concurrency, self.share),
            )
            self._tenants[tenant.name] = st
        return st

    def decide(self, tenant: Tenant, tokens: int) -> Outcome:
        st = self._state(tenant)
        now = self._clock() * 1000.0
        r = st.rpm.peek(1, now) if st.rpm else None
        k = st.tpm.peek(tokens, now) if st.tpm else None
        in_use = st.in_use if self._inflight is None else self._inflight(tenant.name)
        reason, retry = "ok", 0.0
        if r is not None and not r.allowed:
            reason, retry = "requests", r.retry_after_ms
        elif k is not None and not k.allowed:
            reason, retry = "tokens", k.retry_after_ms
        elif st.conc and in_use >= st.conc:
            reason, retry = "concurrency", 1000.0
        allowed = reason == "ok"
        if allowed:
            if st.rpm:
                st.rpm.commit(1, now)
            if st.tpm:
                st.tpm.commit(tokens, now)
            if st.conc:
                st.in_use += 1
        return Outcome(
            allowed=allowed,
            reason=reason,
            req_limit=st.rpm.limit if st.rpm else 0,
            req_remaining=r.remaining if r else -1,
            req_reset_ms=r.reset_ms if r else 0.0,
            tok_limit=st.tpm.limit if st.tpm else 0,
            tok_remaining=k.remaining if k else -1,
            tok_reset_ms=k.reset_ms if k else 0.0,
            retry_after_ms=retry,
        )

    async def admit(self, tenant: Tenant, tokens: int) -> Admission:
        out = self.decide(tenant, tokens)
        if not out.allowed:
            raise _refusal(out, tenant, tokens)
        return Admission(tenant=tenant, reserved_tokens=tokens, backend="local", headers=out.headers())

    async def complete(self, admission: Admission, used_tokens: int) -> None:
        if admission.done:
            return
        admission.done = True
        self.settle(admission, used_tokens)

    def settle(self, admission: Admission, used_tokens: int) -> None:
        """Reconcile a local admission's tokens and free its slot (no `done` bookkeeping)."""
        st = self._state(admission.tenant)
        if st.tpm is not None:
            st.tpm.adjust(used_tokens - admission.reserved_tokens, self._clock() * 1000.0)
        if st.conc and st.in_use > 0:
            st.in_use -= 1


_REDIS_ERRORS = (RedisError, OSError, TimeoutError)


class RedisLimiter:
    """Limits shared by every replica through Redis, exact through Redis trouble where it can be.

    One round trip per admitted request on the common path (the previous request's settlement rides
    on the next admission, see `settlements`); an adaptive timeout and a circuit breaker (see
    `redis_guard`); while the breaker is open, `failMode: open` admits on a local fallback that
    starts from the budget Redis last reported for the tenant, divided by the live replicas (see
    `replicas`), and charges what it admitted to Redis once Redis answers; `failMode: closed`
    refuses. Worst cases: docs/global-router-resilience.md.
    """

    SETTLE_AFTER_S = 0.05  # a quiet tenant's settlement waits at most this long for a next admission
    WARM_CONNECTIONS = 16  # pooled connections opened at start

    def __init__(
        self,
        client: aioredis.Redis,
        redis_cfg: RedisConfig,
        settings: RateLimitSettings,
        *,
        replica_id: str = "",
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._client = client
        self._prefix = redis_cfg.key_prefix
        self._fail_mode = redis_cfg.fail_mode
        self._default_share = redis_cfg.local_share
        self._settings = settings
        self._clock = clock
        self._lease_ms = int(settings.concurrency_lease_s * 1000)
        self.latency = LatencyTracker(redis_cfg.timeout_s, redis_cfg.max_timeout_s)
        self.breaker = CircuitBreaker(
            redis_cfg.breaker_failures, redis_cfg.breaker_open_s, redis_cfg.breaker_max_open_s, clock
        )
        self.replicas = ReplicaRegistry(
            client,
            key=f"{self._prefix}replicas",
            replica_id=replica_id or uuid.uuid4().hex[:8],
            ttl_s=redis_cfg.replica_ttl_s,
            timeout_s=redis_cfg.max_timeout_s,
        )
        self._inflight: dict[str, int] = {}  # tenant -> this replica's running requests
        self._fallback = LocalLimiter(share=self._default_share, clock=clock, inflight=self._in_use)
        self._fallback_at: dict[str, float] = {}  # tenant -> when its fallback bucket was seeded
        self._closed_at = -math.inf  # when the breaker last closed (Redis came back)
        self._seeded_from_redis: set[str] = set()  # tenants whose fallback started from a Redis answer
        self._settle_grace_s = redis_cfg.breaker_max_open_s + 2 * self.SETTLE_AFTER_S
        self._seen: dict[str, Seen] = {}
        self.settlements = Settlements(clock)
        self._admit = LuaScript("admit")
        self._settle = LuaScript("settle")
        self._renew = LuaScript("renew")
        self._leases: dict[str, str] = {}  # live lease id -> its zset key
        self._tasks: list[asyncio.Task[None]] = []

    def _in_use(self, tenant_name: str) -> int:
        return self._inflight.get(tenant_name, 0)

    @property
    def mode(self) -> str:
        if self.breaker.state != "closed":
            return "fallback-open" if self._fail_mode == "open" else "fallback-closed"
        return "redis"

    def stats(self) -> dict[str, float | int | str | None]:
        return {
            "breaker": self.breaker.state,
            "breaker_opened": self.breaker.opened_total,
            "timeout_ms": round(self.latency.timeout() * 1000, 1),
            "redis_p99_ms": round(self.latency.p99() * 1000, 1),
            "live_replicas": self.replicas.live,
            "settlements_pending": self.settlements.pending(),
        }

    async def start(self) -> None:
        try:
            async with asyncio.timeout(self.latency.ceiling_s):
                for script in (self._admit, self._settle, self._renew):
                    await script.load(self._client)
                # Open part of the pool now, each connection timed (connect + PING): the first
                # burst then neither waits for connections nor meets a timeout sized for none.
                await asyncio.gather(*(self._timed_ping() for _ in range(self.WARM_CONNECTIONS)))
        except _REDIS_ERRORS as exc:
            _reraise_if_cancelled()
            self._failed("probe", exc, self.latency.ceiling_s)  # starts open: a request probes again
        else:
            await self.replicas.announce()
        self._tasks = [
            asyncio.create_task(self._renew_loop(), name="ratelimit-lease-renewer"),
            asyncio.create_task(self._settle_loop(), name="ratelimit-settler"),
            asyncio.create_task(self.replicas.run(), name="ratelimit-replica-announcer"),
        ]

    async def _timed_ping(self) -> None:
        t0 = time.perf_counter()
        await self._client.ping()
        self.latency.observe(time.perf_counter() - t0)

    async def stop(self) -> None:
        tasks, self._tasks = self._tasks, []
        for t in tasks:
            t.cancel()
        for t in tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await t
        if self.breaker.state == "closed":
            await self.flush_settlements(max_age_s=0.0)
            await self.replicas.withdraw()

    def _keys(self, tenant: str) -> list[str]:
        base = f"{self._prefix}rl:{{{tenant}}}:"
        return [base + "req", base + "tok", base + "conc"]

    def _failed(self, route: Route, exc: BaseException, timeout_s: float) -> None:
        if isinstance(exc, (TimeoutError, RedisTimeout)) and (
            route == "probe" or self.breaker.state == "closed"
        ):
            self.latency.observe(timeout_s)  # a timeout is a sample of at least itself
        if self.breaker.failure(route) and route != "probe":
            log.warning(
                "rate limiter: Redis failing (%s); breaker open, failMode=%s",
                type(exc).__name__ or "timeout",
                self._fail_mode,
            )

    async def _call(self, route: Route, fn: Callable[[], Awaitable[Any]]) -> Any:
        """One Redis call under the adaptive timeout (the ceiling for a probe); records the outcome."""
        limit = self.latency.ceiling_s if route == "probe" else self.latency.timeout()
        t0 = time.perf_counter()
        try:
            async with asyncio.timeout(limit):
                result = await fn()
        except _REDIS_ERRORS as exc:
            _reraise_if_cancelled()
            self._failed(route, exc, limit)
            raise
        self.latency.observe(time.perf_counter() - t0)
        if self.breaker.success(route):
            self._closed_at = self._clock()
            log.info("rate limiter: Redis answering again; breaker closed")
        return result

    async def admit(self, tenant: Tenant, tokens: int) -> Admission:
        if not (tenant.requests_per_minute or tenant.tokens_per_minute or tenant.max_concurrency):
            return Admission(tenant=tenant, reserved_tokens=tokens, backend="none", headers={})
        route = self.breaker.route()
        if route != "fallback":
            lease_id = uuid.uuid4().hex if tenant.max_concurrency else ""
            keys = self._keys(tenant.name)
            owed = self.settlements.take(tenant.name)
            args: list[Any] = [
                tenant.requests_per_minute,
                tenant.tokens_per_minute,
                tenant.max_concurrency,
                tokens,
                lease_id,
                self._lease_ms,
                int(PERIOD_MS),
                *(owed.args() if owed else [0, 0]),
            ]
            try:
                raw = await self._call(route, functools.partial(self._admit, self._client, keys, args))
            except _REDIS_ERRORS:
                if owed is not None:
                    self.settlements.restore(owed)
            else:
                out = _outcome(raw, tenant)
                self._seen[tenant.name] = Seen(self._clock(), out.req_remaining, out.tok_remaining)
                if not out.allowed:
                    raise _refusal(out, tenant, tokens)
                if (
                    tenant.name in self._seeded_from_redis
                    and self._fallback.has(tenant)
                    and self._clock() < self._closed_at + self._settle_grace_s
                ):
                    # Redis just came back and other replicas may not have charged it for their
                    # fallback admissions yet: this replica also keeps to its own share meanwhile
                    local = self._fallback.decide(tenant, tokens)
                    if not local.allowed:
                        self.settlements.add(tenant, requests=-1, tokens=-tokens, lease=lease_id)
                        raise _refusal(local, tenant, tokens)
                else:
                    # a fallback bucket, once seeded, counts every grant of this replica (calls in
                    # flight at the seed, and those after Redis is back, until it is re-seeded)
                    self._fallback.charge(tenant, tokens)
                if lease_id:
                    self._leases[lease_id] = keys[2]
                self._inflight[tenant.name] = self._inflight.get(tenant.name, 0) + 1
                return Admission(
                    tenant=tenant,
                    reserved_tokens=tokens,
                    backend="redis",
                    headers=out.headers(),
                    lease_id=lease_id,
                )
        if self._fail_mode == "closed":
            status = self._settings.fail_closed_status
            raise OpenAIError(
                status,
                "Rate limiting is unavailable and this router is configured to refuse requests "
                "until it is back (redis.failMode: closed).",
                code="rate_limiter_unavailable",
                headers={"retry-after": "1"},
            )
        return self._fallback_admit(tenant, tokens)

    def _fallback_admit(self, tenant: Tenant, tokens: int) -> Admission:
        # (Re)start the tenant's fallback bucket from what Redis last said — unless Redis may not
        # have been charged yet for fallback admissions (this replica's, or, for `_settle_grace_s`
        # after Redis came back, the other replicas', which settle once their own breakers close):
        # it would then say too much is left. A tenant never seen since start begins empty.
        seen = self._seen.get(tenant.name)
        created = self._fallback_at.get(tenant.name)
        if created is None or (
            seen is not None
            and seen.at_s > created
            and seen.at_s >= self._closed_at + self._settle_grace_s
            and not self.settlements.owes_requests(tenant.name)
        ):
            self._fallback.drop(tenant)
            self._fallback.share = self.replicas.share(self._default_share)
            # (admissions of this replica still in flight at Redis may yet be granted from that
            # same remainder: each grant is charged to this bucket when its answer arrives)
            self._fallback.seed(tenant, seen or Seen(self._clock(), 0, 0))
            if seen is not None:  # (an empty cold-start bucket caps nothing after recovery)
                self._seeded_from_redis.add(tenant.name)
            else:
                self._seeded_from_redis.discard(tenant.name)
            self._fallback_at[tenant.name] = self._clock()
        out = self._fallback.decide(tenant, tokens)
        if not out.allowed:
            raise _refusal(out, tenant, tokens)
        self._inflight[tenant.name] = self._inflight.get(tenant.name, 0) + 1
        self.settlements.add(tenant, requests=1, tokens=tokens)  # charged to Redis once it is back
        return Admission(tenant=tenant, reserved_tokens=tokens, backend="local", headers=out.headers())

    async def complete(self, admission: Admission, used_tokens: int) -> None:
        """No Redis call: the reconciliation and the lease release ride on a later admission."""
        if admission.done:
            return
        admission.done = True
        if admission.backend == "none":
            return
        tenant = admission.tenant
        n = self._inflight.get(tenant.name, 0)
        if n <= 1:
            self._inflight.pop(tenant.name, None)
        else:
            self._inflight[tenant.name] = n - 1
        delta = used_tokens - admission.reserved_tokens if tenant.tokens_per_minute else 0
        if admission.backend == "local":
            self._fallback.settle(admission, used_tokens)
            if delta:
                self.settlements.add(tenant, tokens=delta)
            return
        self._leases.pop(admission.lease_id, None)
        if delta or admission.lease_id:
            self.settlements.add(tenant, tokens=delta, lease=admission.lease_id)

    async def flush_settlements(self, max_age_s: float | None = None) -> int:
        """Send settlements older than `max_age_s` (default SETTLE_AFTER_S) now; returns how many."""
        if self.breaker.state != "closed":
            return 0
        due = self.settlements.due(self.SETTLE_AFTER_S if max_age_s is None else max_age_s)
        sent = 0
        for owed in due:
            t = owed.tenant
            args = [t.requests_per_minute, t.tokens_per_minute, int(PERIOD_MS), *owed.args()]
            keys = self._keys(t.name)
            try:
                await self._call("redis", functools.partial(self._settle, self._client, keys, args))
            except _REDIS_ERRORS:
                self.settlements.restore(owed)
                for rest in due[due.index(owed) + 1 :]:
                    self.settlements.restore(rest)
                break
            sent += 1
        return sent

    async def _settle_loop(self) -> None:
        while True:
            await asyncio.sleep(self.SETTLE_AFTER_S)
            await self.flush_settlements()

    async def _renew_loop(self) -> None:
        interval = max(0.5, self._settings.concurrency_lease_s / 3)
        while True:
            await asyncio.sleep(interval)
            await self.renew_leases()

    async def renew_leases(self) -> int:
        """Push the expiry of every lease this replica still holds; returns how many were renewed."""
        if self.breaker.state != "closed":
            return 0
        items = list(self._leases.items())
        renewed = 0
        for i in range(0, len(items), 500):
            chunk = items[i : i + 500]
            keys = [key for _, key in chunk]
            args = [lease for lease, _ in chunk] + [self._lease_ms]
            try:
                renewed += int(
                    await self._call("redis", functools.partial(self._renew, self._client, keys, args))
                )
            except _REDIS_ERRORS:
                break
        return renewed


def _outcome(raw: list[int], tenant: Tenant) -> Outcome:
    allowed, reason, req_rem, req_reset, tok_rem, tok_reset, retry, _in_use = (int(x) for x in raw)
    return Outcome(
        allowed=bool(allowed),
        reason=REASONS.get(reason, "ok"),
        req_limit=tenant.requests_per_minute,
        req_remaining=req_rem,
        req_reset_ms=float(req_reset),
        tok_limit=tenant.tokens_per_minute,
        tok_remaining=tok_rem,
        tok_reset_ms=float(tok_reset),
        retry_after_ms=float("inf") if retry < 0 else float(retry),
    )


def reservation_tokens(prompt_tokens: int, max_tokens: int | None, default_max_tokens: int) -> int:
    """What admission reserves: the prompt plus the most the model may generate."""
    return prompt_tokens + (max_tokens if max_tokens is not None else default_max_tokens)


def build_limiter(
    client: aioredis.Redis | None,
    redis_cfg: RedisConfig | None,
    settings: RateLimitSettings,
    *,
    replica_id: str = "",
) -> RateLimiter:
    if client is None or redis_cfg is None:
        return LocalLimiter(share=1.0)
    return RedisLimiter(client, redis_cfg, settings, replica_id=replica_id)
