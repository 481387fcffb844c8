"""The router's view of the fleet: the latest capacity report of every cluster.

The capacity server writes it (`publish`, one call per report); cluster selection reads it on every
request (`snapshot`, no I/O). With one replica the view lives in process (`MemoryFleetView`); with
several, `RedisFleetView` shares it: each report is a Redis key with a TTL plus a pub/sub notice, and
each replica keeps a local cache fed by the notices and by a periodic rescan, so a missed notice or a
restarted replica converges, and a cluster whose key expired disappears everywhere.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import time
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Literal, Protocol

import msgspec

from global_router.candidate_index import CandidateIndex, ModelCandidates

if TYPE_CHECKING:
    import redis.asyncio

    from common.proto.fleetgate.v1 import capacity_pb2

log = logging.getLogger(__name__)

CapacityTypeName = Literal["spot", "on-demand"]


@dataclass(frozen=True, slots=True)
class ModelCapacity:
    """One base model's aggregate in one cluster (see the proto's ModelCapacity for meanings).

    `adapters` holds every LoRA adapter the cluster can serve for this model (resident or loadable),
    so "does this cluster serve adapter X" is `X in adapters`; `adapters_resident` is the subset
    already loaded on some pod (for affinity: no load delay there). `gpu_tokens_per_s` is one GPU's
    generation throughput with every slot busy (cost per token = $/GPU-hour / it); 0 = not reported
    (an older agent), and it defaults so states stored by older replicas still decode.
    """

    model: str
    ready_pods: int
    saturated_pods: int
    queued: int
    running: int
    kv_headroom: float  # 0..1
    adapters: frozenset[str]
    est_ttft_ms: float
    tokens_per_s: float
    headroom_requests: int
    adapters_resident: frozenset[str] = frozenset()
    gpu_tokens_per_s: float = 0.0


@dataclass(frozen=True, slots=True)
class ClusterState:
    """A cluster as of its latest report; `received_at` is the router's clock (unix seconds)."""

    cluster_id: str
    region: str
    zone: str
    gateway_url: str
    seq: int
    received_at: float
    models: dict[str, ModelCapacity]
    cost_per_gpu_hour: float
    gpus: int
    capacity_type: str  # "spot" | "on-demand"
    draining: bool  # the cluster asked to leave rotation
    router_drain: bool = False  # drain requested by an operator at the router

    def age(self, now: float | None = None) -> float:
        return (time.time() if now is None else now) - self.received_at


class FleetView(Protocol):
    def snapshot(self) -> list[ClusterState]:
        """Hot path, no I/O: the latest known state per cluster (the caller filters freshness)."""
        ...

    def get(self, cluster_id: str) -> ClusterState | None: ...

    def candidates(self, model: str) -> ModelCandidates | None:
        """Hot path, O(1): the clusters whose latest report serves `model` (kept per report)."""
        ...

    def router_drained(self, cluster_id: str) -> bool:
        """Whether an operator drained this cluster at the router (even before it ever reported)."""
        ...

    def router_drains(self) -> list[str]:
        """Every cluster an operator drained at the router, sorted (`GET /admin/drains`)."""
        ...

    async def publish(self, state: ClusterState) -> None: ...

    async def set_router_drain(self, cluster_id: str, drain: bool) -> None: ...

    async def start(self) -> None: ...

    async def stop(self) -> None: ...


class FleetViewError(RuntimeError):
    """The shared store could not record an operator action (the caller should report and retry)."""


def _capacity_type_name(value: int) -> CapacityTypeName:
    from common.proto.fleetgate.v1 import capacity_pb2

    return "spot" if value == capacity_pb2.CAPACITY_TYPE_SPOT else "on-demand"


def _rate(value: float) -> float:
    """A reported throughput, with NaN, infinities and negatives read as 'not reported' (0)."""
    return value if math.isfinite(value) and value > 0 else 0.0


def state_from_report(report: capacity_pb2.CapacityReport, received_at: float) -> ClusterState:
    """Translate a validated report; a model listed twice keeps its last entry."""
    models = {
        m.model: ModelCapacity(
            model=m.model,
            ready_pods=m.ready_pods,
            saturated_pods=m.saturated_pods,
            queued=m.queued,
            running=m.running,
            kv_headroom=min(1.0, max(0.0, m.kv_headroom)),
            adapters=frozenset(m.adapters_resident) | frozenset(m.adapters_available),
            est_ttft_ms=max(0.0, m.est_ttft_ms),
            tokens_per_s=max(0.0, m.tokens_per_second),
            headroom_requests=m.headroom_requests,
            adapters_resident=frozenset(m.adapters_resident),
            gpu_tokens_per_s=_rate(m.gpu_tokens_per_second),
        )
        for m in report.models
    }
    return ClusterState(
        cluster_id=report.cluster_id,
        region=report.region,
        zone=report.zone,
        gateway_url=report.gateway_url,
        seq=report.sequence,
        received_at=received_at,
        models=models,
        cost_per_gpu_hour=max(0.0, report.cost_per_gpu_hour),
        gpus=report.gpus,
        capacity_type=_capacity_type_name(report.capacity_type),
        draining=report.draining,
    )


class _Cache:
    """Latest state per cluster plus the operator drain set; shared by both views."""

    def __init__(self, ttl_s: float) -> None:
        self.ttl_s = ttl_s
        self.states: dict[str, ClusterState] = {}
        self.drains: set[str] = set()
        self.index = CandidateIndex()  # per-model candidate lists, in step with `states`

    def put(self, state: ClusterState, *, only_if_newer: bool) -> None:
        cur = self.states.get(state.cluster_id)
        if only_if_newer and cur is not None and cur.received_at > state.received_at:
            return
        drained = state.cluster_id in self.drains
        if state.router_drain != drained:
            state = replace(state, router_drain=drained)
        self.states[state.cluster_id] = state
        self.index.put(state)

    def set_drain(self, cluster_id: str, drain: bool) -> None:
        if drain:
            self.drains.add(cluster_id)
        else:
            self.drains.discard(cluster_id)
        cur = self.states.get(cluster_id)
        if cur is not None and cur.router_drain != drain:
            self.states[cluster_id] = state = replace(cur, router_drain=drain)
            self.index.put(state)

    def replace_drains(self, drains: set[str]) -> None:
        for cid in self.drains | drains:
            self.set_drain(cid, cid in drains)

    def prune(self, now: float) -> list[str]:
        """Drop clusters silent for longer than the TTL (mirrors Redis key expiry)."""
        gone = [cid for cid, s in self.states.items() if now - s.received_at > self.ttl_s]
        for cid in gone:
            del self.states[cid]
            self.index.drop(cid)
        return gone


class MemoryFleetView:
    """One router replica: the view lives in process; silent clusters are dropped after `ttl_s`."""

    def __init__(self, *, ttl_s: float = 10.0) -> None:
        self._cache = _Cache(ttl_s)
        self._task: asyncio.Task[None] | None = None

    def snapshot(self) -> list[ClusterState]:
        return list(self._cache.states.values())

    def get(self, cluster_id: str) -> ClusterState | None:
        return self._cache.states.get(cluster_id)

    def candidates(self, model: str) -> ModelCandidates | None:
        return self._cache.index.get(model)

    def router_drained(self, cluster_id: str) -> bool:
        return cluster_id in self._cache.drains

    def router_drains(self) -> list[str]:
        return sorted(self._cache.drains)

    async def publish(self, state: ClusterState) -> None:
        self._cache.put(state, only_if_newer=False)

    async def set_router_drain(self, cluster_id: str, drain: bool) -> None:
        self._cache.set_drain(cluster_id, drain)

    async def start(self) -> None:
        if self._task is None:
            self._task = asyncio.create_task(self._prune_loop(), name="fleet-view-prune")

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None

    async def _prune_loop(self) -> None:
        interval = max(0.05, min(1.0, self._cache.ttl_s / 4))
        while True:
            await asyncio.sleep(interval)
            self._cache.prune(time.time())


class _RawNotice(msgspec.Struct, omit_defaults=True):
    """A pub/sub message: a new state, or an operator drain change.

    The state is carried as raw JSON and left undecoded on arrival: a replica compares its bytes with
    the last ones it applied for that cluster and decodes only a change (its own publishes echo
    back, and a rescan re-reads every unchanged cluster)."""

    kind: Literal["state", "drain"]
    cluster_id: str
    state: msgspec.Raw = msgspec.Raw(b"null")  # the ClusterState's JSON (kind "state")
    drain: bool = False


_encode = msgspec.json.Encoder().encode
_decode_state = msgspec.json.Decoder(ClusterState).decode
_decode_notice = msgspec.json.Decoder(_RawNotice).decode


class RedisFleetView:
    """Every replica sees every cluster.

    Layout under `prefix`: `cluster:<id>` = the state as JSON with a TTL (`SET ... PX`), the hash
    `drains` = operator drains (no TTL), channel `fleet` = notices. Redis errors are logged, never
    raised into the data path: the local cache keeps serving and report ages show how fresh it is.
    """

    def __init__(
        self,
        client: redis.asyncio.Redis,
        *,
        prefix: str,
        ttl_s: float,
        rescan_interval_s: float | None = None,
        op_timeout_s: float = 1.0,
    ) -> None:
        self._redis = client
        self._prefix = prefix
        self._ttl_ms = max(1, int(ttl_s * 1000))
        self._cache = _Cache(ttl_s)
        self._rescan_s = rescan_interval_s if rescan_interval_s is not None else max(0.1, min(2.0, ttl_s / 4))
        self._op_timeout_s = op_timeout_s
        self._channel = f"{prefix}fleet"
        self._drains_key = f"{prefix}drains"
        self._tasks: list[asyncio.Task[None]] = []
        self._stopping = False
        self._redis_ok = True
        self._raw: dict[str, bytes] = {}  # cluster → the state bytes its cached state came from

    # --- readers (no I/O) ----------------------------------------------------
    def snapshot(self) -> list[ClusterState]:
        return list(self._cache.states.values())

    def get(self, cluster_id: str) -> ClusterState | None:
        return self._cache.states.get(cluster_id)

    def candidates(self, model: str) -> ModelCandidates | None:
        return self._cache.index.get(model)

    def router_drained(self, cluster_id: str) -> bool:
        return cluster_id in self._cache.drains

    def router_drains(self) -> list[str]:
        return sorted(self._cache.drains)

    @property
    def redis_ok(self) -> bool:
        """False while the last Redis operation failed (for status pages and metrics)."""
        return self._redis_ok

    # --- writers ---------------------------------------------------------------
    def _key(self, cluster_id: str) -> str:
        return f"{self._prefix}cluster:{cluster_id}"

    def encode_notice(self, state: ClusterState) -> bytes:
        """The pub/sub notice for `state` (its state bytes are also what the key holds)."""
        return _encode(
            _RawNotice(kind="state", cluster_id=state.cluster_id, state=msgspec.Raw(self._state_bytes(state)))
        )

    def _state_bytes(self, state: ClusterState) -> bytes:
        return _encode(
            replace(state, router_drain=False) if state.router_drain else state
        )  # drains travel separately

    async def publish(self, state: ClusterState) -> None:
        self._cache.put(state, only_if_newer=False)
        raw = self._state_bytes(state)  # encoded once, for the key and the notice
        self._raw[state.cluster_id] = raw
        notice = _encode(_RawNotice(kind="state", cluster_id=state.cluster_id, state=msgspec.Raw(raw)))
        try:
            async with asyncio.timeout(self._op_timeout_s):
                async with self._redis.pipeline(transaction=False) as pipe:
                    pipe.set(self._key(state.cluster_id), raw, px=self._ttl_ms)
                    pipe.publish(self._channel, notice)
                    await pipe.execute()
            self._mark_ok()
        except Exception as exc:  # any Redis failure: keep serving from the local cache
            _reraise_if_cancelled()
            self._mark_failed("publish", exc)

    async def set_router_drain(self, cluster_id: str, drain: bool) -> None:
        """Record an operator drain for every replica; raises FleetViewError if Redis refuses."""
        notice = _encode(_RawNotice(kind="drain", cluster_id=cluster_id, drain=drain))
        try:
            async with asyncio.timeout(self._op_timeout_s):
                async with self._redis.pipeline(transaction=False) as pipe:
                    if drain:
                        pipe.hset(self._drains_key, cluster_id, "1")
                    else:
                        pipe.hdel(self._drains_key, cluster_id)
                    pipe.publish(self._channel, notice)
                    await pipe.execute()
            self._mark_ok()
        except Exception as exc:
            _reraise_if_cancelled()
            self._mark_failed("set_router_drain", exc)
            raise FleetViewError(f"cannot record drain of cluster {cluster_id!r}: {exc}") from exc
        self._cache.set_drain(cluster_id, drain)

    # --- lifecycle -------------------------------------------------------------
    async def start(self) -> None:
        if self._tasks:
            return
        await self.rescan()  # converge before serving; a failure just leaves the cache empty
        self._tasks = [
            asyncio.create_task(self._subscribe_loop(), name="fleet-view-subscribe"),
            asyncio.create_task(self._rescan_loop(), name="fleet-view-rescan"),
        ]

    async def stop(self) -> None:
        self._stopping = True
        tasks, self._tasks = self._tasks, []
        for t in tasks:
            t.cancel()
        if tasks:
            # redis-py can swallow a cancellation that lands inside a timed-out command; the
            # loops also check `_stopping`, and stop() never waits forever.
            _, pending = await asyncio.wait(tasks, timeout=3.0)
            if pending:
                log.warning("fleet view: %d background task(s) did not stop in time", len(pending))

    # --- convergence -------------------------------------------------------------
    async def rescan(self) -> bool:
        """Reload every cluster key and the drain set; returns False (cache kept) if Redis failed."""
        now = time.time()
        try:
            async with asyncio.timeout(max(self._op_timeout_s, 2.0)):
                pattern = _glob_escape(self._key("")) + "*"
                keys = [k async for k in self._redis.scan_iter(match=pattern, count=500)]
                values = await self._redis.mget(keys) if keys else []
                drains_raw = await self._redis.hkeys(self._drains_key)
        except Exception as exc:
            _reraise_if_cancelled()
            self._mark_failed("rescan", exc)
            self._prune(now)
            return False
        self._mark_ok()
        self._cache.replace_drains({_text(d) for d in drains_raw})
        skip = len(self._key(""))
        for key, raw in zip(keys, values, strict=True):
            if raw is None:  # expired between SCAN and MGET
                continue
            self._apply_state(_text(key)[skip:], raw if isinstance(raw, bytes) else raw.encode())
        # A cluster absent from Redis is not dropped at once: its key expired (then it is older
        # than the TTL and the prune drops it) or was lost to a Redis restart (then the reporting
        # replica rewrites it on the next report). Either way the TTL bounds its life here.
        self._prune(now)
        return True

    def _prune(self, now: float) -> None:
        for cid in self._cache.prune(now):
            self._raw.pop(cid, None)

    def _apply_state(self, cluster_id: str, raw: bytes) -> None:
        """Decode and cache a state unless it is byte for byte the one already cached."""
        if self._raw.get(cluster_id) == raw and cluster_id in self._cache.states:
            return
        try:
            state = _decode_state(raw)
        except msgspec.DecodeError as exc:
            log.warning("fleet view: ignoring an undecodable cluster record: %s", exc)
            return
        before = self._cache.states.get(state.cluster_id)
        self._cache.put(state, only_if_newer=True)
        if self._cache.states.get(state.cluster_id) is not before:
            self._raw[state.cluster_id] = raw

    async def _rescan_loop(self) -> None:
        while not self._stopping:
            await asyncio.sleep(self._rescan_s)
            if not self._stopping:
                await self.rescan()

    async def _subscribe_loop(self) -> None:
        backoff = 0.1
        while not self._stopping:
            pubsub = self._redis.pubsub(ignore_subscribe_messages=True)
            try:
                await pubsub.subscribe(self._channel)
                if backoff > 0.1:  # re-subscribed after a failure: pick up what was missed
                    await self.rescan()
                backoff = 0.1
                while not self._stopping:
                    msg = await pubsub.get_message(timeout=1.0)
                    if msg is not None and msg.get("type") == "message":
                        self._apply_notice(msg["data"])
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                _reraise_if_cancelled()
                self._mark_failed("subscribe", exc)
                await asyncio.sleep(backoff)
                backoff = min(backoff * 2, 2.0)
            finally:
                with contextlib.suppress(Exception):
                    await pubsub.aclose()

    def _apply_notice(self, data: bytes | str) -> None:
        try:
            notice = _decode_notice(data)
        except msgspec.DecodeError as exc:
            log.warning("fleet view: ignoring an undecodable notice: %s", exc)
            return
        if notice.kind == "drain":
            self._cache.set_drain(notice.cluster_id, notice.drain)
        else:
            self._apply_state(notice.cluster_id, bytes(notice.state))

    # --- error reporting (one line per outage, not per operation) ---------------
    def _mark_failed(self, op: str, exc: BaseException) -> None:
        if self._redis_ok:
            log.warning("fleet view: Redis unavailable (%s: %s); serving from the local cache", op, exc)
        self._redis_ok = False

    def _mark_ok(self) -> None:
        if not self._redis_ok:
            log.info("fleet view: Redis reachable again")
        self._redis_ok = True


def _reraise_if_cancelled() -> None:
    """A timeout wrapper can turn our task's cancellation into a TimeoutError; honour it anyway."""
    task = asyncio.current_task()
    if task is not None and task.cancelling():
        raise asyncio.CancelledError


def _glob_escape(text: str) -> str:
    """A literal for Redis MATCH patterns (a key prefix may contain glob characters)."""
    return "".join("\\" + c if c in "*?[]\\" else c for c in text)


def _text(value: bytes | str) -> str:
    return value.decode() if isinstance(value, bytes) else value
