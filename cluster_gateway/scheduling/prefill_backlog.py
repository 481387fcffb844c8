"""The `prefill` scorer: how many prompt tokens a pod must still compute before this request's first
token, the request's own uncached part included.

Why a scorer of its own: on a vLLM-like engine TTFT is mostly prefill, and prefill is what request
counts hide. A pod decoding 15 sequences serves a new request whose 6k-token prefix it caches in one
short step; a pod with nothing running but no copy of the prefix needs seconds of prefill, and every
sequence it runs stalls behind those chunks. Queue and in-flight counts see the first pod as the busy
one; this scorer sees the second as the slow one. Both views are kept (weights), so a warm pod still
sheds load once its real backlog grows.

Per pod, the cost of sending this request there is
  backlog (uncached prompt tokens this gateway sent there recently, decaying with time constant
  `decayS`: work the pod has probably not finished yet) + own (this prompt's tokens times the share of
  its blocks the prefix index does not place on that pod),
min-max normalised, lower is better, over a span of at least `minSpanTokens` (4096 by default: two
of vLLM's default 2048-token prefill chunks, ~1.3 s on an L4). So the signal scales with the prefill a
pod would save: a cached 6k-token prefix is worth the scorer's whole weight, a cached 1,200-token
system prompt about a third of it, and a few hundred tokens next to nothing. With short prompts the
in-flight and load scorers still spread a burst; with long shared prefixes, where one cold prefill
costs seconds and stalls every sequence on that pod, affinity wins (measured in `bench routing`:
`long-shared-prefix` TTFT p90 1.1 s -> 0.2 s with the scorer at weight 4 in `latency`, no loss on
the short-prompt scenarios; docs/benchmarks.md).

Mixed GPUs: a pod's tokens are divided by its prefill speed relative to the slowest pod, from the
`fleetgate.io/prefill-tokens-per-second` annotation (`pod_speed.py`), and its backlog drains that
much faster. Counts cannot see that an H100 computes a prompt ~9x faster than an L4; without this,
`latency` sent 42% of the `heterogeneous` scenario's requests to its two H100s where the peers sent
two thirds, and lost at p90 (0.19 s against 0.17); with it, 0.15-0.17 / 0.21-0.29 s at p90 / p99
over two full runs, against the best tuned peer's 0.17 / 0.54. A pool without the annotation, or with one value on every pod,
scores exactly as before.

Reads the `prefix_index` plugin (param `index` names another); keeps its own per-pod backlog.
"""

from __future__ import annotations

import math
from collections import OrderedDict
from collections.abc import Mapping
from typing import Any

from cluster_gateway.pool import PodState
from cluster_gateway.scheduling.plugin import PluginBase, SchedulingHandle
from cluster_gateway.scheduling.pod_speed import relative_speeds
from cluster_gateway.scheduling.prefix_cache import prefix_index_of
from cluster_gateway.scheduling.types import LLMRequest, SchedulingContext
from common.plugins import param

_PENDING_MAX = 4096  # scored requests awaiting their dispatch (one a decision; shed ones age out)
_BACKLOG_KEEP = 64  # pods with a backlog before dispatch prunes those under one token


class PrefillBacklogScorer(PluginBase):
    """Prompt tokens the pod must still compute before this request's first token, min-max, lower is
    better: this prompt's share the prefix index does not place there, plus the uncached tokens this
    gateway sent there lately, decaying with time constant `decayS` (default 2.0) as the pod works
    through them. The span is at least `minSpanTokens` (default 4096, two prefill chunks), so the
    score gap tracks the prefill saved: a cached 6k-token prefix is worth a full point, a 1,200-token
    system prompt about a third, a few hundred tokens next to nothing. A warm pod busy decoding beats
    an idle cold one; a pod just handed cold prompts sheds the next. In a pool of mixed GPUs whose
    pods carry `fleetgate.io/prefill-tokens-per-second`, tokens count in the slowest pod's time: a
    pod k times faster pays a k-th and drains its backlog k times sooner. Reads the `prefix_index`
    plugin (param `index`).
    """

    def __init__(self, name: str, params: Mapping[str, Any], handle: SchedulingHandle) -> None:
        super().__init__(name, params, handle)
        where = f"scheduling.plugins.{name}"
        self.decay_s: float = float(param(params, "decayS", 2.0, (int, float), where))
        self.min_span: float = float(param(params, "minSpanTokens", 4096, (int, float), where))
        self._index = prefix_index_of(handle, params, name)
        self._clock = handle.clock
        self._backlog: dict[str, tuple[float, float]] = {}  # pod → (tokens, when last updated)
        self._pruned_at = float("-inf")
        # request → (its tokens, {pod: uncached tokens} where the index places part of it) from its
        # decision, so dispatch adds what the score assumed (the index learns the dispatch too, and
        # would then call everything cached)
        self._pending: OrderedDict[int, tuple[float, dict[str, float]]] = OrderedDict()
        # pod → prefill speed relative to the slowest (`pod_speed`); empty in a uniform pool
        self._speed: dict[str, float] = {}

    def backlog(self, pod: str, now: float) -> float:
        tokens, at = self._backlog.get(pod, (0.0, now))
        return self._left(tokens, at, now, self._speed.get(pod, 1.0)) if tokens else 0.0

    def _left(self, tokens: float, at: float, now: float, speed: float = 1.0) -> float:
        """What remains at `now` of `tokens` sent at `at` (a pod `speed` times faster works through
        them that much sooner)."""
        return tokens * math.exp((at - now) * speed / self.decay_s)

    def score(self, ctx: SchedulingContext, pods: list[PodState]) -> list[float]:
        """Touches only the pods the index places the prompt on and the pods with a backlog, not every
        candidate: at 1,000 pods a per-pod pass with an `exp` would cost more than the pick's budget."""
        n = len(pods)
        tokens = float(ctx.request.prompt_tokens)
        cost = [tokens] * n
        own: dict[str, float] = {}
        matches = self._index.matches(ctx)
        total = len(self._index.block_hashes(ctx.request)) if matches else 0
        if total:
            per_block = tokens / total
            for i, name, k in ctx.located(pods, matches):
                cost[i] = own[name] = tokens - k * per_block
        now = ctx.now
        speed = self._speed
        for i, name, (left, at) in ctx.located(pods, self._backlog):
            cost[i] += self._left(left, at, now, speed.get(name, 1.0))
        if speed:  # mixed GPUs: tokens a pod must compute, in the slowest pod's seconds
            cost = [c / speed.get(p.name, 1.0) for c, p in zip(cost, pods, strict=True)]
        self._pending[id(ctx.request)] = (tokens, own)
        while len(self._pending) > _PENDING_MAX:
            self._pending.popitem(last=False)
        lo, hi = min(cost), max(cost)
        if hi == lo:
            return [1.0] * n
        span = max(hi - lo, self.min_span)
        return [1.0 - (c - lo) / span for c in cost]

    def on_dispatch(self, req: LLMRequest, pod: PodState) -> None:
        tokens, own = self._pending.pop(id(req), (float(req.prompt_tokens), {}))
        now = self._clock()
        self._backlog[pod.name] = (self.backlog(pod.name, now) + own.get(pod.name, tokens), now)
        # forget backlogs that have decayed away, so scores stay cheap; at most once per decay
        # constant, so a busy large pool does not pay a pass over every backlog on each dispatch
        if len(self._backlog) > _BACKLOG_KEEP and now - self._pruned_at >= self.decay_s:
            self._pruned_at = now
            for name in [n for n, (t, at) in self._backlog.items() if self.backlog(n, now) < 1.0]:
                del self._backlog[name]

    def on_pods_changed(self, pods: list[PodState]) -> None:
        self._speed = relative_speeds(pods)
        keep = {p.name for p in pods}
        for name in [n for n in self._backlog if n not in keep]:
            del self._backlog[name]
