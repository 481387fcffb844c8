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

from itertools import compress

from cluster_gateway.pool import PodState
from cluster_gateway.scheduling.prefix_home import HashRing, prefix_key
from cluster_gateway.scheduling.types import SchedulingContext

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


class QueueScorer:
    """Estimated queue = waiting at the last scrape + dispatched by this gateway since; min-max."""

    name = "queue"

    def score(self, ctx: SchedulingContext, pods: list[PodState]) -> list[float]:
        return _min_max_lower_better(ctx.est_queue(pods), ctx.profile.queue_depth)


class WaitingQueueScorer:
    """Reference shape: the waiting queue of the last scrape only, min-max normalised."""

    name = "queue_waiting"

    def score(self, ctx: SchedulingContext, pods: list[PodState]) -> list[float]:
        return _min_max_lower_better([p.metrics.waiting if p.metrics is not None else 0 for p in pods], 0.0)


class LoadScorer:
    """Everything on the pod (running + waiting + dispatched since the scrape), min-max.

    The queue alone is 0 on every pod that still has batch room; this separates a pod decoding 3
    sequences from one decoding 200, which matters for inter-token latency and prefill interference.
    """

    name = "load"

    def score(self, ctx: SchedulingContext, pods: list[PodState]) -> list[float]:
        q = ctx.est_queue(pods)
        return _min_max_lower_better(
            [(p.metrics.running if p.metrics is not None else 0) + e for p, e in zip(pods, q, strict=True)],
            LOAD_MIN_SPAN,
        )


class InflightScorer:
    """Requests this gateway has outstanding on each pod, min-max: live, unlike scraped metrics."""

    name = "inflight"

    def score(self, ctx: SchedulingContext, pods: list[PodState]) -> list[float]:
        return _min_max_lower_better([p.inflight for p in pods], INFLIGHT_MIN_SPAN)


class KVCacheScorer:
    """KV headroom, projected: the last scraped usage plus the prompts dispatched since then.

    The projection needs the pod's cache size (`cache_config_info`); without it, the scraped usage.
    Pods without a KV gauge (TGI) score neutral.
    """

    name = "kv_cache"

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


class RawKVCacheScorer:
    """Reference shape: 1 - scraped KV usage."""

    name = "kv_raw"

    def score(self, ctx: SchedulingContext, pods: list[PodState]) -> list[float]:
        kvs = [m.kv_usage if (m := p.metrics) is not None else None for p in pods]
        return [NEUTRAL if kv is None else (1.0 - kv if kv < 1.0 else 0.0) for kv in kvs]


class PrefixScorer:
    """Share of the prompt's blocks a pod likely caches, faded by that pod's load.

    Affinity is worth a prefill skipped, but not a queue: it falls linearly with the pod's estimated
    queue and is gone at twice the saturation depth, and a pod over the KV threshold (about to evict
    the very blocks we want) gets none. So a hot shared prompt spreads to a second pod once the first
    is busy, and the second then holds the prefix too.
    """

    name = "prefix"
    fade_depths = 2.0  # affinity reaches zero at this many saturation depths of estimated queue

    def score(self, ctx: SchedulingContext, pods: list[PodState]) -> list[float]:
        n = len(pods)
        matches = ctx.prefix_matches()
        if not matches:
            return [0.0] * n
        total = len(ctx.block_hashes())
        fade = 1.0 / (self.fade_depths * ctx.profile.queue_depth)
        kvt = ctx.profile.kv_usage
        q = ctx.est_queue(pods)
        out = [0.0] * n
        for name, matched in matches.items():
            i = ctx.position(pods, name)
            if i is None:
                continue  # not a candidate for this request
            damp = 1.0 - q[i] * fade
            m = pods[i].metrics
            if damp <= 0.0 or (m is not None and m.kv_usage is not None and m.kv_usage >= kvt):
                continue
            out[i] = damp * matched / total
        return out


class PrefixHomeScorer:
    """The prompt prefix's home pods on a consistent-hash ring (1.0 first, 0.5 second), faded by load
    like `prefix`. Every gateway replica computes the same homes, so replicas that share a pool
    also share where a new prefix goes, without sharing their prefix indexes. Adapter requests score
    0 everywhere: where an adapter is resident matters more than where a prefix would go."""

    name = "prefix_home"
    home_blocks = 16  # the prefix that names a home: 16 blocks, ~256 tokens (a system prompt's head)

    def __init__(self) -> None:
        self._ring: HashRing | None = None
        self._ring_version = -2

    def _ring_for(self, ctx: SchedulingContext, pods: list[PodState]) -> HashRing:
        if not ctx.pool_positions:  # no pool-wide view (a bare context): the candidates themselves
            return HashRing(p.endpoint.name for p in pods)
        if self._ring is None or self._ring_version != ctx.pool_version:
            if self._ring is None or not self._ring.has_members(ctx.pool_positions):
                self._ring = HashRing(ctx.pool_positions)  # membership changed, not just a pod's labels
            self._ring_version = ctx.pool_version
        return self._ring

    def score(self, ctx: SchedulingContext, pods: list[PodState]) -> list[float]:
        n = len(pods)
        out = [0.0] * n
        key = prefix_key(ctx.request.prompt_text, ctx.block_chars, self.home_blocks)
        if key is None or ctx.is_adapter_request(pods):
            return out
        fade = 1.0 / (PrefixScorer.fade_depths * ctx.profile.queue_depth)
        kvt = ctx.profile.kv_usage
        q = ctx.est_queue(pods)
        for rank, name in enumerate(self._ring_for(ctx, pods).homes(key, 2)):
            i = ctx.position(pods, name)
            if i is None:
                continue
            m = pods[i].metrics
            damp = 1.0 - q[i] * fade
            if damp <= 0.0 or (m is not None and m.kv_usage is not None and m.kv_usage >= kvt):
                continue
            out[i] = damp * (1.0 if rank == 0 else 0.5)
        return out


class RawPrefixScorer:
    """Reference shape: matched blocks / total blocks, however busy the pod is."""

    name = "prefix_raw"

    def score(self, ctx: SchedulingContext, pods: list[PodState]) -> list[float]:
        matches = ctx.prefix_matches()
        if not matches:
            return [0.0] * len(pods)
        total = len(ctx.block_hashes())
        get = matches.get
        return [get(p.endpoint.name, 0) / total for p in pods]


class LoraScorer:
    """LoRA affinity: resident (or just sent there by this gateway) 1.0, free slot 0.8, queued for it
    0.6, must evict 0.0; 1.0 everywhere for a base-model request.

    An adapter is what some pod's `/v1/models` lists as one (`SchedulingContext.is_adapter_request`),
    so even its first request, before any pod has it resident, scores free slots above evictions.
    """

    name = "lora"

    def score(self, ctx: SchedulingContext, pods: list[PodState]) -> list[float]:
        model = ctx.request.model
        if not ctx.is_adapter_request(pods):
            return [1.0] * len(pods)
        now = ctx.now
        recent = ctx.adapters.recent
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
