"""Scorers rate every candidate pod in [0, 1] (higher is better); a profile weights and sums them.

They are written as whole-list passes (one comprehension per signal) because at 1000 pods the
per-pod Python overhead, not the arithmetic, is what a decision costs.

The reference picker's weaknesses these address: its queue signal is the waiting queue of the last
scrape, so a burst between scrapes lands on the one pod that looked idle (`queue` adds what this
gateway dispatched since, `inflight` what it has outstanding); and its prefix affinity is undamped,
so a hot shared prompt piles onto one pod (`prefix` fades affinity as that pod's queue builds).
`queue_waiting`, `kv_raw` and `prefix_raw` are the reference shapes, kept for the baseline profile.
"""

from __future__ import annotations

from collections.abc import Mapping
from itertools import compress
from typing import Any

from cluster_gateway.pool import PodState
from cluster_gateway.scheduling.adapter_memory import AdapterMemory, AdapterPlacement
from cluster_gateway.scheduling.plugin import PluginBase, SchedulingHandle
from cluster_gateway.scheduling.prefix_cache import prefix_index_of
from cluster_gateway.scheduling.prefix_home import HashRing, prefix_key
from cluster_gateway.scheduling.types import LLMRequest, SchedulingContext
from common.plugins import param

NEUTRAL = 0.5  # for a signal a pod does not report (TGI has no KV or LoRA gauges)


def _min_max_lower_better(values: list[int] | list[float], min_span: float) -> list[float]:
    """Min-max normalised, lower is better, over a span of at least `min_span`.

    Plain min-max turns "0 vs 1 queued" into a full point, as loud as "0 vs 50", so a single
    queued request could outvote a resident LoRA adapter or a cached prefix. The floor keeps small
    differences small while still ranking them.
    """
    lo = min(values)
    hi = max(values)
    if hi == lo:
        return [1.0] * len(values)
    inv = 1.0 / max(hi - lo, min_span)
    top = 1.0 + lo * inv  # 1 - (v - lo) / span, with one multiply per pod
    return [top - v * inv for v in values]


INFLIGHT_MIN_SPAN = 8.0
LOAD_MIN_SPAN = 8.0


class QueueScorer(PluginBase):
    """Estimated queue = waiting at the last scrape + dispatched by this gateway since; min-max."""

    def score(self, ctx: SchedulingContext, pods: list[PodState]) -> list[float]:
        return _min_max_lower_better(ctx.est_queue(pods), ctx.profile.queue_depth)


class WaitingQueueScorer(PluginBase):
    """Reference shape: the waiting queue of the last scrape only, min-max normalised."""

    def score(self, ctx: SchedulingContext, pods: list[PodState]) -> list[float]:
        return _min_max_lower_better([p.metrics.waiting if p.metrics is not None else 0 for p in pods], 0.0)


class LoadScorer(PluginBase):
    """Everything on the pod (running + waiting + dispatched since the scrape), min-max.

    The queue alone is 0 on every pod that still has batch room; this separates a pod decoding 3
    sequences from one decoding 200, which matters for inter-token latency and prefill interference.
    """

    def score(self, ctx: SchedulingContext, pods: list[PodState]) -> list[float]:
        q = ctx.est_queue(pods)
        return _min_max_lower_better(
            [(p.metrics.running if p.metrics is not None else 0) + e for p, e in zip(pods, q, strict=True)],
            LOAD_MIN_SPAN,
        )


class InflightScorer(PluginBase):
    """Requests this gateway has outstanding on each pod, min-max: live, unlike scraped metrics."""

    def score(self, ctx: SchedulingContext, pods: list[PodState]) -> list[float]:
        return _min_max_lower_better([p.inflight for p in pods], INFLIGHT_MIN_SPAN)


class KVCacheScorer(PluginBase):
    """KV headroom, projected: the last scraped usage plus the prompts dispatched since then.

    The projection needs the pod's cache size (`cache_config_info`); without it, the scraped usage.
    Pods without a KV gauge (TGI) score neutral.
    """

    def score(self, ctx: SchedulingContext, pods: list[PodState]) -> list[float]:
        kvs = [m.kv_usage if (m := p.metrics) is not None else None for p in pods]
        out = [NEUTRAL if kv is None else (1.0 - kv if kv < 1.0 else 0.0) for kv in kvs]
        tokens = ctx.request.prompt_tokens  # this prompt stands in for the ones dispatched since the scrape
        for i in compress(range(len(pods)), [p.dispatched_since_scrape for p in pods]):  # pods sent something
            m = pods[i].metrics
            kv = kvs[i]
            if kv is not None and m is not None and m.num_gpu_blocks and m.block_size:
                kv += pods[i].dispatched_since_scrape * tokens / (m.num_gpu_blocks * m.block_size)
                out[i] = 1.0 - kv if kv < 1.0 else 0.0
        return out


class RawKVCacheScorer(PluginBase):
    """Reference shape: 1 - scraped KV usage."""

    def score(self, ctx: SchedulingContext, pods: list[PodState]) -> list[float]:
        kvs = [m.kv_usage if (m := p.metrics) is not None else None for p in pods]
        return [NEUTRAL if kv is None else (1.0 - kv if kv < 1.0 else 0.0) for kv in kvs]


class PrefixScorer(PluginBase):
    """Share of the prompt's blocks a pod likely caches, faded by that pod's load.

    Affinity is worth a prefill skipped, but not a queue: it falls linearly with the pod's estimated
    queue and is gone at `fadeDepths` (default 2) saturation depths, and a pod over the KV threshold
    (about to evict the very blocks we want) gets none. So a hot shared prompt spreads to a second pod
    once the first is busy, and the second then holds the prefix too. Reads the `prefix_index` plugin
    (param `index` names another).
    """

    def __init__(self, name: str, params: Mapping[str, Any], handle: SchedulingHandle) -> None:
        super().__init__(name, params, handle)
        self.fade_depths: float = param(params, "fadeDepths", 2.0, (int, float), f"scheduling.plugins.{name}")
        self._index = prefix_index_of(handle, params, name)

    def nominate(self, ctx: SchedulingContext, limit: int) -> list[str]:
        """Two-stage picks score the pods holding the longest cached prefix."""
        return self._index.nominate(ctx, limit)

    def score(self, ctx: SchedulingContext, pods: list[PodState]) -> list[float]:
        n = len(pods)
        matches = self._index.matches(ctx)
        if not matches:
            return [0.0] * n
        total = len(self._index.block_hashes(ctx.request))
        fade = 1.0 / (self.fade_depths * ctx.profile.queue_depth)
        kvt = ctx.profile.kv_usage
        q = ctx.est_queue(pods)
        out = [0.0] * n
        for i, _, matched in ctx.located(pods, matches):
            damp = 1.0 - q[i] * fade
            m = pods[i].metrics
            if damp <= 0.0 or (m is not None and m.kv_usage is not None and m.kv_usage >= kvt):
                continue
            out[i] = damp * matched / total
        return out


class PrefixHomeScorer(PluginBase):
    """The prompt prefix's home pods on a consistent-hash ring (1.0 first, 0.5 second), faded by load
    like `prefix`.

    Every gateway replica computes the same homes, so replicas that share a pool also share where a
    new prefix goes, without sharing their prefix indexes. Adapter requests score 0 everywhere: where
    an adapter is resident matters more than where a prefix would go.

    Params: `homeBlocks` (default 16 blocks, ~256 tokens: a system prompt's head names the home),
    `fadeDepths` (default 2). Blocks are `scheduling.prefixCache.blockChars` long.
    """

    def __init__(self, name: str, params: Mapping[str, Any], handle: SchedulingHandle) -> None:
        super().__init__(name, params, handle)
        where = f"scheduling.plugins.{name}"
        self.home_blocks: int = param(params, "homeBlocks", 16, int, where)
        self.fade_depths: float = param(params, "fadeDepths", 2.0, (int, float), where)
        self.block_chars = handle.config.prefix_cache.block_chars
        self._ring: HashRing | None = None
        self._pods: list[PodState] = []

    def on_pods_changed(self, pods: list[PodState]) -> None:
        self._pods = pods
        names = [p.endpoint.name for p in pods]
        if self._ring is None or not self._ring.has_members(names):
            self._ring = HashRing(names)  # membership changed, not just a pod's labels

    def nominate(self, ctx: SchedulingContext, limit: int) -> list[str]:
        """Two-stage picks score the prompt's two home pods."""
        key = self._key(ctx)
        if key is None or self._ring is None or ctx.is_adapter_request(self._pods):
            return []
        return self._ring.homes(key, 2)

    def _key(self, ctx: SchedulingContext) -> int | None:
        memo = ctx.request_memo
        if "prefix_home_key" not in memo:
            memo["prefix_home_key"] = prefix_key(ctx.request.prompt_text, self.block_chars, self.home_blocks)
        k: int | None = memo["prefix_home_key"]
        return k

    def score(self, ctx: SchedulingContext, pods: list[PodState]) -> list[float]:
        n = len(pods)
        out = [0.0] * n
        key = self._key(ctx)
        if key is None or ctx.is_adapter_request(pods):
            return out
        fade = 1.0 / (self.fade_depths * ctx.profile.queue_depth)
        kvt = ctx.profile.kv_usage
        q = ctx.est_queue(pods)
        ring = self._ring or HashRing(p.endpoint.name for p in pods)  # never told the pool: the candidates
        for rank, name in enumerate(ring.homes(key, 2)):
            i = ctx.position(pods, name)
            if i is None:
                continue
            m = pods[i].metrics
            damp = 1.0 - q[i] * fade
            if damp <= 0.0 or (m is not None and m.kv_usage is not None and m.kv_usage >= kvt):
                continue
            out[i] = damp * (1.0 if rank == 0 else 0.5)
        return out


class RawPrefixScorer(PluginBase):
    """Reference shape: matched blocks / total blocks, however busy the pod is.

    Reads the `prefix_index` plugin (param `index` names another)."""

    def __init__(self, name: str, params: Mapping[str, Any], handle: SchedulingHandle) -> None:
        super().__init__(name, params, handle)
        self._index = prefix_index_of(handle, params, name)

    def nominate(self, ctx: SchedulingContext, limit: int) -> list[str]:
        return self._index.nominate(ctx, limit)

    def score(self, ctx: SchedulingContext, pods: list[PodState]) -> list[float]:
        matches = self._index.matches(ctx)
        if not matches:
            return [0.0] * len(pods)
        total = len(self._index.block_hashes(ctx.request))
        get = matches.get
        return [get(p.endpoint.name, 0) / total for p in pods]


class LoraScorer(PluginBase):
    """LoRA affinity: resident (or just sent there by this gateway) 1.0, free slot 0.8, queued for it
    0.6, must evict 0.0; 1.0 everywhere for a base-model request.

    An adapter is what some pod's `/v1/models` lists as one (`SchedulingContext.is_adapter_request`),
    so even its first request, before any pod has it resident, scores free slots above evictions.
    Owns the memory of which adapter it recently sent where. Params: `memoryTtlS` (default 2.0),
    how long "just sent there" lasts.
    """

    def __init__(self, name: str, params: Mapping[str, Any], handle: SchedulingHandle) -> None:
        super().__init__(name, params, handle)
        ttl: float = param(params, "memoryTtlS", 2.0, (int, float), f"scheduling.plugins.{name}")
        self.memory = AdapterMemory(ttl_s=float(ttl))
        self.placement = AdapterPlacement()
        self._pods: list[PodState] = []
        self._pool = handle.pool
        self._clock = handle.clock

    def on_dispatch(self, req: LLMRequest, pod: PodState) -> None:
        m = pod.metrics
        cat = self._pool.catalog
        if m is not None and m.max_lora and (cat.is_adapter(req.model) or not cat.exact):
            self.memory.record(pod.name, req.model, self._clock())

    def on_pods_changed(self, pods: list[PodState]) -> None:
        names = {p.name for p in pods}
        self.memory.retain_pods(names)
        self.placement.retain_pods(names)
        self._pods = pods

    def nominate(self, ctx: SchedulingContext, limit: int) -> list[str]:
        """Two-stage picks score the pods with the adapter resident, queued or just sent there."""
        model = ctx.request.model
        if not ctx.is_adapter_request(self._pods):
            return []
        held = self.placement.pods_with(model, self._pods, ctx.now)
        recent = self.memory.recent_pods(model, ctx.now)
        if recent:
            held = recent + held
        return held[:limit]

    def score(self, ctx: SchedulingContext, pods: list[PodState]) -> list[float]:
        model = ctx.request.model
        if not ctx.is_adapter_request(pods):
            return [1.0] * len(pods)
        now = ctx.now
        recent = self.memory.recent
        out = []
        for p in pods:
            m = p.metrics
            if m is None or not m.max_lora:
                out.append(NEUTRAL)
            elif model in m.running_adapters:
                out.append(1.0)
            elif len(m.running_adapters) < m.max_lora:
                # We just sent it here (and no other adapter has taken every slot since): it is
                # loaded, or loading, by the time this request runs.
                out.append(1.0 if recent(p.endpoint.name, model, now) else 0.8)
            elif model in m.waiting_adapters:
                out.append(0.6)
            else:
                out.append(0.0)
        return out
