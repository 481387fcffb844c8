"""The `kv_fit` filter: keep a request off pods whose KV cache it would overflow, while another has room.

Why: a vLLM-like engine that runs out of KV blocks preempts its newest running sequence and later
recomputes it from scratch. One 32k-token document sent to a pod already holding another on a 64k
pool does exactly that, and every chat on that pod waits behind the recomputation. The scraped KV
gauge cannot see it coming: blocks are allocated chunk by chunk as a prompt is prefilled, so a
document dispatched a second ago shows as a few percent. This filter adds what the gateway itself
has committed to each pod (the uncached prompt tokens and `max_tokens` of every request it has in
flight there, until it completes) and drops the pods where this request's own footprint no longer
fits under `maxUsage` (default 0.95) of the pool. If it fits nowhere, every pod stays (fail open):
the scorers then pick the least bad one.

Needs the pod's cache geometry (`cache_config_info`); pods without it are kept.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Mapping
from typing import Any

from cluster_gateway.pool import PodState
from cluster_gateway.scheduling.plugin import PluginBase, SchedulingHandle
from cluster_gateway.scheduling.prefix_cache import prefix_index_of
from cluster_gateway.scheduling.types import LLMRequest, SchedulingContext
from common.plugins import param

DEFAULT_OUTPUT_TOKENS = 256  # a request without max_tokens still grows while it decodes
_TRACKED_MAX = 65_536  # in-flight requests remembered (a request that never completes ages out)


class KVFitFilter(PluginBase):
    """Drops pods whose KV pool this request would overflow: scraped usage or, if higher, the tokens
    this gateway has in flight there (uncached prompt + `max_tokens` each), plus this request's own.
    Fails open when it fits nowhere; pods without cache geometry are kept. Param `maxUsage` (0.95)."""

    def __init__(self, name: str, params: Mapping[str, Any], handle: SchedulingHandle) -> None:
        super().__init__(name, params, handle)
        where = f"scheduling.plugins.{name}"
        self.max_usage: float = float(param(params, "maxUsage", 0.95, (int, float), where))
        self._index = prefix_index_of(handle, params, name)
        self._committed: dict[str, float] = {}  # pod → tokens of its in-flight requests
        self._inflight: OrderedDict[int, tuple[str, float]] = OrderedDict()  # request → (pod, tokens)
        self._pending: OrderedDict[int, dict[str, float]] = OrderedDict()  # request → pod → footprint

    def committed(self, pod: str) -> float:
        return self._committed.get(pod, 0.0)

    def _footprints(self, ctx: SchedulingContext, pods: list[PodState]) -> list[float]:
        req = ctx.request
        out_tokens = float(req.max_tokens if req.max_tokens is not None else DEFAULT_OUTPUT_TOKENS)
        tokens = float(req.prompt_tokens)
        matches = self._index.matches(ctx)
        total = len(self._index.block_hashes(req))
        if not matches or not total:
            return [tokens + out_tokens] * len(pods)
        get = matches.get
        return [tokens * (1.0 - get(p.endpoint.name, 0) / total) + out_tokens for p in pods]

    def filter(self, ctx: SchedulingContext, pods: list[PodState]) -> list[PodState]:
        need = self._footprints(ctx, pods)
        self._pending[id(ctx.request)] = {p.endpoint.name: n for p, n in zip(pods, need, strict=True)}
        while len(self._pending) > _TRACKED_MAX:
            self._pending.popitem(last=False)
        if ctx.degraded:
            return pods
        kept = []
        for p, n in zip(pods, need, strict=True):
            m = p.metrics
            if m is None or not m.num_gpu_blocks or not m.block_size:
                kept.append(p)
                continue
            capacity = float(m.num_gpu_blocks * m.block_size)
            used = max((m.kv_usage or 0.0) * capacity, self.committed(p.endpoint.name))
            if used + n <= self.max_usage * capacity:
                kept.append(p)
        return kept or pods

    def on_dispatch(self, req: LLMRequest, pod: PodState) -> None:
        fallback = float(req.prompt_tokens + (req.max_tokens or DEFAULT_OUTPUT_TOKENS))
        tokens = self._pending.pop(id(req), {}).get(pod.name, fallback)
        retried = self._inflight.pop(id(req), None)  # a retry on another pod: the first one is over
        if retried is not None:
            self._release(*retried)
        self._committed[pod.name] = self.committed(pod.name) + tokens
        self._inflight[id(req)] = (pod.name, tokens)
        while len(self._inflight) > _TRACKED_MAX:
            old_pod, old_tokens = self._inflight.popitem(last=False)[1]
            self._release(old_pod, old_tokens)

    def on_complete(self, req: LLMRequest, pod: PodState, outcome: str) -> None:
        entry = self._inflight.pop(id(req), None)
        if entry is not None:
            self._release(*entry)

    def _release(self, pod: str, tokens: float) -> None:
        left = self.committed(pod) - tokens
        if left > 0.5:
            self._committed[pod] = left
        else:
            self._committed.pop(pod, None)

    def on_pods_changed(self, pods: list[PodState]) -> None:
        keep = {p.name for p in pods}
        for name in [n for n in self._committed if n not in keep]:
            del self._committed[name]
