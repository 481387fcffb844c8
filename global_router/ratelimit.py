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
import logging
import math
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Protocol

import redis.asyncio as aioredis
from redis.exceptions import RedisError

from common.config.router import RateLimitSettings, RedisConfig, Tenant
from common.errors import OpenAIError, rate_limited
from global_router.gcra import PERIOD_MS, Gcra, format_duration
from global_router.lua_script import LuaScript

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


class _TenantLocal:
    __slots__ = ("conc", "in_use", "rpm", "tpm")

    def __init__(self, rpm: int, tpm: int, conc: int) -> None:
        self.rpm = Gcra(rpm) if rpm > 0 else None
        self.tpm = Gcra(tpm) if tpm > 0 else None
        self.conc = conc
        self.in_use = 0


class LocalLimiter:
    """The same limits in process, each scaled by `share` (1.0 when this is the only replica)."""

    def __init__(self, share: float = 1.0, clock: Callable[[], float] = time.monotonic) -> None:
        self.share = share
        self._clock = clock
        self._tenants: dict[str, _TenantLocal] = {}

    @property
    def mode(self) -> str:
        return "local"

    async def start(self) -> None:
        return None

    async def stop(self) -> None:
        return None

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
        reason, retry = "ok", 0.0
        if r is not None and not r.allowed:
            reason, retry = "requests", r.retry_after_ms
        elif k is not None and not k.allowed:
            reason, retry = "tokens", k.retry_after_ms
        elif st.conc and st.in_use >= st.conc:
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
        st = self._state(admission.tenant)
        if st.tpm is not None:
            st.tpm.adjust(used_tokens - admission.reserved_tokens, self._clock() * 1000.0)
        if st.conc and st.in_use > 0:
            st.in_use -= 1


class RedisLimiter:
    """Limits shared by every replica through Redis; falls back per `failMode` while Redis is down."""

    RETRY_REDIS_AFTER_S = 1.0  # while down, probe Redis again at most this often

    def __init__(self, client: aioredis.Redis, redis_cfg: RedisConfig, settings: RateLimitSettings) -> None:
        self._client = client
        self._prefix = redis_cfg.key_prefix
        self._fail_mode = redis_cfg.fail_mode
        self._settings = settings
        self._lease_ms = int(settings.concurrency_lease_s * 1000)
        self._fallback = LocalLimiter(share=redis_cfg.local_share)
        self._admit = LuaScript("admit")
        self._complete = LuaScript("complete")
        self._renew = LuaScript("renew")
        self._leases: dict[str, str] = {}  # live lease id -> its zset key
        self._down_until = 0.0
        self._renewer: asyncio.Task[None] | None = None

    @property
    def mode(self) -> str:
        if time.monotonic() < self._down_until:
            return "fallback-open" if self._fail_mode == "open" else "fallback-closed"
        return "redis"

    async def start(self) -> None:
        try:
            for script in (self._admit, self._complete, self._renew):
                await script.load(self._client)
        except (RedisError, OSError) as exc:
            self._mark_down(exc)
        self._renewer = asyncio.create_task(self._renew_loop(), name="ratelimit-lease-renewer")

    async def stop(self) -> None:
        if self._renewer is not None:
            self._renewer.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._renewer
            self._renewer = None

    def _keys(self, tenant: str) -> list[str]:
        base = f"{self._prefix}rl:{{{tenant}}}:"
        return [base + "req", base + "tok", base + "conc"]

    def _mark_down(self, exc: BaseException) -> None:
        if time.monotonic() >= self._down_until:
            log.warning(
                "rate limiter: Redis unavailable (%s); failMode=%s", type(exc).__name__, self._fail_mode
            )
        self._down_until = time.monotonic() + self.RETRY_REDIS_AFTER_S

    async def admit(self, tenant: Tenant, tokens: int) -> Admission:
        if not (tenant.requests_per_minute or tenant.tokens_per_minute or tenant.max_concurrency):
            return Admission(tenant=tenant, reserved_tokens=tokens, backend="none", headers={})
        if time.monotonic() >= self._down_until:
            lease_id = uuid.uuid4().hex
            keys = self._keys(tenant.name)
            args = [
                tenant.requests_per_minute,
                tenant.tokens_per_minute,
                tenant.max_concurrency,
                tokens,
                lease_id,
                self._lease_ms,
                int(PERIOD_MS),
            ]
            try:
                raw = await self._admit(self._client, keys, args)
            except (RedisError, OSError) as exc:
                self._mark_down(exc)
            else:
                out = _outcome(raw, tenant)
                if not out.allowed:
                    raise _refusal(out, tenant, tokens)
                if tenant.max_concurrency:
                    self._leases[lease_id] = keys[2]
                return Admission(
                    tenant=tenant,
                    reserved_tokens=tokens,
                    backend="redis",
                    headers=out.headers(),
                    lease_id=lease_id if tenant.max_concurrency else "",
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
        return await self._fallback.admit(tenant, tokens)

    async def complete(self, admission: Admission, used_tokens: int) -> None:
        if admission.done:
            return
        if admission.backend == "local":
            await self._fallback.complete(admission, used_tokens)
            return
        admission.done = True
        if admission.backend != "redis":
            return
        self._leases.pop(admission.lease_id, None)
        delta = used_tokens - admission.reserved_tokens
        tenant = admission.tenant
        if not admission.lease_id and (delta == 0 or not tenant.tokens_per_minute):
            return
        keys = self._keys(tenant.name)
        try:
            await self._complete(
                self._client,
                [keys[1], keys[2]],
                [tenant.tokens_per_minute, delta, admission.lease_id, int(PERIOD_MS)],
            )
        except (RedisError, OSError) as exc:  # the lease expires by itself; the TAT drains by itself
            self._mark_down(exc)

    async def _renew_loop(self) -> None:
        interval = max(0.5, self._settings.concurrency_lease_s / 3)
        while True:
            await asyncio.sleep(interval)
            await self.renew_leases()

    async def renew_leases(self) -> int:
        """Push the expiry of every lease this replica still holds; returns how many were renewed."""
        items = list(self._leases.items())
        renewed = 0
        for i in range(0, len(items), 500):
            chunk = items[i : i + 500]
            try:
                renewed += int(
                    await self._renew(
                        self._client,
                        [key for _, key in chunk],
                        [lease for lease, _ in chunk] + [self._lease_ms],
                    )
                )
            except (RedisError, OSError) as exc:
                self._mark_down(exc)
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
    client: aioredis.Redis | None, redis_cfg: RedisConfig | None, settings: RateLimitSettings
) -> RateLimiter:
    if client is None or redis_cfg is None:
        return LocalLimiter(share=1.0)
    return RedisLimiter(client, redis_cfg, settings)
