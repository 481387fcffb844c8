"""The `precise_prefix` scorer: prefix affinity from what the engines say they cache (KV events)."""

from __future__ import annotations

import asyncio
import logging
from collections import OrderedDict, deque
from collections.abc import Mapping, Sequence
from typing import Any

import zmq.asyncio

from cluster_gateway.pool import PodState
from cluster_gateway.scheduling.plugin import PluginBase, SchedulingHandle
from cluster_gateway.scheduling.precise.index import PARTIAL, TRUSTED, PodCache
from cluster_gateway.scheduling.precise.subscriber import EventStream
from cluster_gateway.scheduling.prefix_cache import prefix_index_of
from cluster_gateway.scheduling.types import LLMRequest, SchedulingContext
from common.config import ConfigError
from common.kv_block_hash import BlockHasher, sim_token_ids
from common.plugins import param

log = logging.getLogger("fleetgate.kv_events")

ENDPOINT_ANNOTATION = "fleetgate.io/kv-events-endpoint"
REPLAY_ANNOTATION = "fleetgate.io/kv-events-replay-endpoint"
TOKENIZERS = ("sim",)


class PrecisePrefixScorer(PluginBase):
    """Share of the prompt's blocks a pod really caches, from the engine's KV events, faded by load
    like `prefix`; the approximate `prefix_index` stands in wherever the events cannot be trusted.

    Subscribes to each pod's vLLM `--kv-events-config` ZMQ stream (BlockStored / BlockRemoved /
    AllBlocksCleared; the simulator publishes the same) and keeps the set of block hashes each pod
    holds. The prompt is tokenised and hashed the way vLLM does (`sha256_cbor` over 16-token blocks,
    chained, seeded like the engine's PYTHONHASHSEED), so a lookup is the longest run of the prompt's
    blocks in a pod's set. A pod is scored by events only while its stream is complete and in order
    (`trusted`); a late-joined stream (`partial`) takes the larger of the precise and approximate
    figures; a stream with lost batches (`gapped`, until AllBlocksCleared), a pod whose hashes do not
    match ours (`mismatch`) or a pod with no stream is scored by the approximate index. Requests
    dispatched in the last `pendingTtlS` count as cached on their pod (events trail the dispatch).

    Event endpoints per pod: annotations `fleetgate.io/kv-events-endpoint` and
    `fleetgate.io/kv-events-replay-endpoint` (`tcp://host:port`), else params `port` / `replayPort`
    (same port on every pod, like vLLM's 5557/5558), else `portOffset` / `replayPortOffset` (added to
    the pod's HTTP port, for simulator fleets on one host). Other params: `topic` (""), `hashSeed`
    ("0"), `blockSize` (16), `tokenizer` ("sim": the only one shipped; real vLLM needs the model's
    tokenizer and chat template, so against vLLM pods every stream ends up `mismatch` or never matches),
    `maxPrefixBlocks` (512), `pendingTtlS` (2.0), `replayTimeoutS` (1.0), `fadeDepths` (2), `index`
    (the approximate index plugin, `prefix_index`).
    """

    def __init__(self, name: str, params: Mapping[str, Any], handle: SchedulingHandle) -> None:
        super().__init__(name, params, handle)
        where = f"scheduling.plugins.{name}"
        self.fade_depths: float = param(params, "fadeDepths", 2.0, (int, float), where)
        self.topic: str = param(params, "topic", "", str, where)
        seed: str = param(params, "hashSeed", "0", str, where)
        block_size: int = param(params, "blockSize", 16, int, where)
        tokenizer: str = param(params, "tokenizer", "sim", str, where)
        self.max_prefix_blocks: int = param(params, "maxPrefixBlocks", 512, int, where)
        self.pending_ttl_s: float = float(param(params, "pendingTtlS", 2.0, (int, float), where))
        self.replay_timeout_s: float = float(param(params, "replayTimeoutS", 1.0, (int, float), where))
        self.port: int | None = param(params, "port", None, int, where)
        self.replay_port: int | None = param(params, "replayPort", None, int, where)
        self.port_offset: int | None = param(params, "portOffset", None, int, where)
        self.replay_port_offset: int | None = param(params, "replayPortOffset", None, int, where)
        if tokenizer not in TOKENIZERS:
            raise ConfigError(
                f"field `{where}.params.tokenizer`: one of {', '.join(TOKENIZERS)} (got {tokenizer!r})"
            )
        if (
            block_size < 1
            or self.max_prefix_blocks < 1
            or self.pending_ttl_s < 0
            or self.replay_timeout_s <= 0
        ):
            raise ConfigError(
                f"field `{where}.params`: blockSize, maxPrefixBlocks >= 1, pendingTtlS >= 0, replayTimeoutS > 0"
            )
        self.hasher = BlockHasher(block_size, seed)
        self._index = prefix_index_of(handle, params, name)
        self._clock = handle.clock
        self.caches: dict[str, PodCache] = {}
        self._streams: dict[str, tuple[tuple[str, str | None], EventStream | None]] = {}
        self._ctx: zmq.asyncio.Context | None = None
        self._wanted: list[PodState] | None = None
        # recently dispatched prefixes: hash -> {pod: dispatch time}, expired through a FIFO
        self._pending: dict[int, dict[str, float]] = {}
        self._pending_fifo: deque[tuple[float, int, str]] = deque()
        self._recent: OrderedDict[int, tuple[LLMRequest, tuple[int, ...]]] = OrderedDict()

    # -- the streams ------------------------------------------------------------------------------
    def endpoints_of(self, pod: PodState) -> tuple[str, str | None] | None:
        """(events endpoint, replay endpoint) for a pod, or None when it publishes none we know of."""
        ep = pod.endpoint
        ann: Mapping[str, str] = getattr(ep, "annotations", None) or {}
        events = ann.get(ENDPOINT_ANNOTATION)
        replay = ann.get(REPLAY_ANNOTATION)
        if events is None and self.port is not None:
            events = f"tcp://{ep.address}:{self.port}"
            if replay is None and self.replay_port is not None:
                replay = f"tcp://{ep.address}:{self.replay_port}"
        elif events is None and self.port_offset is not None:
            events = f"tcp://{ep.address}:{ep.port + self.port_offset}"
            if replay is None and self.replay_port_offset is not None:
                replay = f"tcp://{ep.address}:{ep.port + self.replay_port_offset}"
        return (events, replay) if events else None

    def on_pods_changed(self, pods: list[PodState]) -> None:
        try:
            asyncio.get_running_loop()
        except RuntimeError:
            self._wanted = list(pods)  # no loop yet: subscribe at the first decision
            return
        self._sync(pods)

    def _sync(self, pods: list[PodState]) -> None:
        self._wanted = None
        seen: set[str] = set()
        for pod in pods:
            eps = self.endpoints_of(pod)
            if eps is None:
                continue
            seen.add(pod.name)
            cur = self._streams.get(pod.name)
            if cur is not None and cur[0] == eps:
                continue
            if cur is not None:
                self._drop(pod.name)
            if self._ctx is None:
                self._ctx = zmq.asyncio.Context()
            cache = self.caches[pod.name] = PodCache(pod.name, self._verify)
            stream = EventStream(self._ctx, cache, eps[0], eps[1], self.topic, self.replay_timeout_s)
            stream.start()
            self._streams[pod.name] = (eps, stream)
        for name in [n for n in self._streams if n not in seen]:
            self._drop(name)

    def _drop(self, name: str) -> None:
        _eps, stream = self._streams.pop(name)
        self.caches.pop(name, None)
        if stream is not None:
            asyncio.get_running_loop().create_task(stream.close())

    async def close(self) -> None:
        """Stop every subscription (tests; a gateway's loop ends with the process)."""
        streams = [s for _eps, s in self._streams.values() if s is not None]
        self._streams.clear()
        self.caches.clear()
        for s in streams:
            await s.close()
        if self._ctx is not None:
            self._ctx.term()
            self._ctx = None

    def _verify(
        self, block_size: int, tokens: Sequence[int], lora: str | None, hashes: Sequence[int]
    ) -> bool:
        if block_size != self.hasher.block_size:
            return False
        ours = self.hasher.hashes(tokens, lora, len(hashes))
        return len(ours) == len(hashes) and ours == list(hashes)

    def states(self) -> dict[str, str]:
        """Each subscribed pod's stream state (for /debug and tests)."""
        return {name: c.state for name, c in self.caches.items()}

    # -- scoring ----------------------------------------------------------------------------------
    def request_hashes(self, req: LLMRequest, lora: str | None) -> tuple[int, ...]:
        """The prompt's block ids as the engines name them (memoised for the dispatch that follows)."""
        key = id(req)
        hit = self._recent.get(key)
        if hit is not None and hit[0] is req:
            return hit[1]
        hashes = tuple(self.hasher.hashes(sim_token_ids(req.prompt_text), lora, self.max_prefix_blocks))
        self._recent[key] = (req, hashes)
        if len(self._recent) > 256:
            self._recent.popitem(last=False)
        return hashes

    def _pending_matches(self, hashes: Sequence[int], now: float) -> dict[str, int]:
        self._expire(now)
        if not hashes:
            return {}
        first = self._pending.get(hashes[0])
        if not first:
            return {}
        out: dict[str, int] = {}
        for pod in first:
            n = 1
            while n < len(hashes) and pod in self._pending.get(hashes[n], ()):
                n += 1
            out[pod] = n
        return out

    def _expire(self, now: float) -> None:
        fifo = self._pending_fifo
        cutoff = now - self.pending_ttl_s
        while fifo and fifo[0][0] <= cutoff:
            t, h, pod = fifo.popleft()
            holders = self._pending.get(h)
            if holders is not None and holders.get(pod) == t:
                del holders[pod]
                if not holders:
                    del self._pending[h]

    def on_dispatch(self, req: LLMRequest, pod: PodState) -> None:
        if pod.name not in self.caches or self.pending_ttl_s <= 0:
            return
        hit = self._recent.get(id(req))
        if hit is None or hit[0] is not req:
            return  # not scored by this plugin (another profile chose the pod)
        now = self._clock()
        for h in hit[1]:
            self._pending.setdefault(h, {})[pod.name] = now
            self._pending_fifo.append((now, h, pod.name))

    def fractions(self, ctx: SchedulingContext, pods: list[PodState]) -> list[float]:
        """Per candidate, the share of the prompt's blocks it caches (before the load fade)."""
        if self._wanted is not None:
            self._sync(self._wanted)
        n = len(pods)
        out = [0.0] * n
        approx = self._index.matches(ctx)
        approx_total = len(self._index.block_hashes(ctx.request))
        if approx and approx_total:
            for i, _, matched in ctx.located(pods, approx):
                out[i] = matched / approx_total
        if not self.caches:
            return out
        lora = ctx.request.model if ctx.is_adapter_request(pods) else None
        hashes = self.request_hashes(ctx.request, lora)
        total = len(hashes)
        if not total:
            return out
        pending = self._pending_matches(hashes, ctx.now)
        caches = self.caches
        for i, p in enumerate(pods):
            cache = caches.get(p.name)
            if cache is None:
                continue
            state = cache.state
            if state == TRUSTED:
                out[i] = max(cache.matched(hashes), pending.get(p.name, 0)) / total
            elif state == PARTIAL:
                out[i] = max(out[i], max(cache.matched(hashes), pending.get(p.name, 0)) / total)
        return out

    def score(self, ctx: SchedulingContext, pods: list[PodState]) -> list[float]:
        frac = self.fractions(ctx, pods)
        fade = 1.0 / (self.fade_depths * ctx.profile.queue_depth)
        kvt = ctx.profile.kv_usage
        q = ctx.est_queue(pods)
        out = [0.0] * len(pods)
        for i, f in enumerate(frac):
            if f <= 0.0:
                continue
            damp = 1.0 - q[i] * fade
            m = pods[i].metrics
            if damp <= 0.0 or (m is not None and m.kv_usage is not None and m.kv_usage >= kvt):
                continue
            out[i] = damp * f
        return out
