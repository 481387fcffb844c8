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
min-max normalised, lower is better, over a span of at least `minSpanTokens` (one prefill chunk by
default, so a few hundred tokens of difference never outvote a resident prefix).

Reads the `prefix_index` plugin (param `index` names another); keeps its own per-pod backlog.
"""

from __future__ import annotations

import math
from collections import OrderedDict
from collections.abc import Mapping
from typing import Any

from cluster_gateway.pool import PodState
from cluster_gateway.scheduling.plugin import PluginBase, SchedulingHandle
from cluster_gateway.scheduling.prefix_cache import prefix_index_of
from cluster_gateway.scheduling.types import LLMRequest, SchedulingContext
from common.plugins import param

_PENDING_MAX = 4096  # scored requests awaiting their dispatch (one a decision; shed ones age out)


class PrefillBacklogScorer(PluginBase):
    """Prompt tokens the pod must still compute before this request's first token, min-max, lower is
    better: this prompt's share the prefix index does not place there, plus the uncached tokens this
    gateway sent there lately, decaying with time constant `decayS` (default 2.0) as the pod works
    through them. The span is at least `minSpanTokens` (default 2048, one prefill chunk), so a few
    hundred tokens never outvote a resident prefix. A warm pod busy decoding beats an idle cold one;
    a pod just handed cold prompts sheds the next. Reads the `prefix_index` plugin (param `index`).
    """

    def __init__(self, name: str, params: Mapping[str, Any], handle: SchedulingHandle) -> None:
        super().__init__(name, params, handle)
        where = f"scheduling.plugins.{name}"
        self.decay_s: float = float(param(params, "decayS", 2.0, (int, float), where))
        self.min_span: float = float(param(params, "minSpanTokens", 2048, (int, float), where))
        self._index = prefix_index_of(handle, params, name)
        self._clock = handle.clock
        self._backlog: dict[str, tuple[float, float]] = {}  # pod → (tokens, when last updated)
        # request → {pod: uncached tokens} from its decision, so dispatch adds what the score assumed
        # (the index learns the dispatch too, and would then call everything cached)
        self._pending: OrderedDict[int, dict[str, float]] = OrderedDict()

    def backlog(self, pod: str, now: float) -> float:
        tokens, at = self._backlog.get(pod, (0.0, now))
        return tokens * math.exp(-(now - at) / self.decay_s) if tokens else 0.0

    def _own(self, ctx: SchedulingContext, pods: list[PodState]) -> list[float]:
        tokens = float(ctx.request.prompt_tokens)
        matches = self._index.matches(ctx)
        total = len(self._index.block_hashes(ctx.request))
        if not matches or not total:
            return [tokens] * len(pods)
        get = matches.get
        return [tokens * (1.0 - get(p.endpoint.name, 0) / total) for p in pods]

    def score(self, ctx: SchedulingContext, pods: list[PodState]) -> list[float]:
        own = self._own(ctx, pods)
        now = ctx.now
        cost = [self.backlog(p.endpoint.name, now) + o for p, o in zip(pods, own, strict=True)]
        self._pending[id(ctx.request)] = {p.endpoint.name: o for p, o in zip(pods, own, strict=True)}
        while len(self._pending) > _PENDING_MAX:
            self._pending.popitem(last=False)
        lo, hi = min(cost), max(cost)
        if hi == lo:
            return [1.0] * len(pods)
        span = max(hi - lo, self.min_span)
        return [1.0 - (c - lo) / span for c in cost]

    def on_dispatch(self, req: LLMRequest, pod: PodState) -> None:
        own = self._pending.pop(id(req), {}).get(pod.name, float(req.prompt_tokens))
        now = self._clock()
        self._backlog[pod.name] = (self.backlog(pod.name, now) + own, now)

    def on_pods_changed(self, pods: list[PodState]) -> None:
        keep = {p.name for p in pods}
        for name in [n for n in self._backlog if n not in keep]:
            del self._backlog[name]
