"""Filters narrow the candidate pods. None of them may leave traffic stuck on a technicality:
stale metrics degrade to in-flight-only routing, and saturation fails open (saying so in its result)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from cluster_gateway.pool import PodState
from cluster_gateway.scheduling.plugin import Filtered, PluginBase, SchedulingHandle
from cluster_gateway.scheduling.types import SchedulingContext
from common.errors import not_found_model


class ModelFilter(PluginBase):
    """Pods that serve the requested model or adapter: those whose `/v1/models` lists it.

    A pod whose list has not been fetched yet (it just joined) is assumed to serve the base models
    its peers list, so scale-up capacity takes traffic at once; it is never assumed to hold an
    adapter (a model some pod lists as a LoRA adapter), since it would answer 404. When no pod's list
    is known (gateway cold start) every pod is a candidate and the pod itself answers for the model.
    Raises 404 `model_not_found` when no pod serves it. Strict: a pod it removes is never a last resort.
    """

    strict = True

    def __init__(self, name: str, params: Mapping[str, Any], handle: SchedulingHandle) -> None:
        super().__init__(name, params, handle)
        self._by_model: dict[str, list[PodState]] | None = None
        self._unlisted: list[PodState] = []

    def on_pods_changed(self, pods: list[PodState]) -> None:
        """Index the pool by served name (the scheduler calls this on membership and catalog changes)."""
        by_model: dict[str, list[PodState]] = {}
        for p in pods:
            for m in p.models:
                by_model.setdefault(m, []).append(p)
        self._by_model = by_model
        self._unlisted = [p for p in pods if not p.models]

    def candidates(self, ctx: SchedulingContext, pods: list[PodState]) -> list[PodState]:
        """`filter` over the whole pool (`pods`), answered from the index: O(pods serving the model)."""
        if self._by_model is None:
            return self.filter(ctx, pods)
        model = ctx.request.model
        listed = self._by_model.get(model)
        if listed is None:
            if len(self._unlisted) == len(pods):
                return pods
            raise not_found_model(model)
        if len(listed) < len(pods) and self._unlisted and _peer_base_model(ctx, pods, model):
            return listed + self._unlisted
        return listed

    def filter(self, ctx: SchedulingContext, pods: list[PodState]) -> list[PodState]:
        model = ctx.request.model
        out = [p for p in pods if model in p.models]
        if len(out) < len(pods):
            if out:
                if _peer_base_model(ctx, pods, model):
                    out.extend(p for p in pods if not p.models)
            elif all(not p.models for p in pods):
                out = pods
        if not out:
            raise not_found_model(model)
        return out


def _peer_base_model(ctx: SchedulingContext, pods: list[PodState], model: str) -> bool:
    """Some pod lists `model` and it is not a LoRA adapter. O(1) with the pool catalog."""
    cat = ctx.catalog
    listed = cat.is_base_model(model) if cat is not None else any(model in p.base_models for p in pods)
    return listed and not ctx.is_adapter_request(pods)


class HealthyFilter(PluginBase):
    """Drops pods known dead (their last `dead_after_failures` scrapes in a row failed) and pods
    ejected by outlier detection (their requests failed).

    Suspect yourself first: when *every* pod failed its scrapes, the likelier cause is this
    gateway's own starved event loop or network, not a fleet that died at once — routing goes on
    over all of them (degraded) and real request failures eject the ones that are really down.
    Ejection likewise fails open when it would leave no pod.
    """

    def filter(self, ctx: SchedulingContext, pods: list[PodState]) -> list[PodState] | Filtered:
        dead, now = ctx.dead_after_failures, ctx.now
        if all(p.consecutive_failures < dead and p.ejected_until <= now for p in pods):
            return pods  # the usual case: one pass, no copies
        alive = [p for p in pods if p.consecutive_failures < dead]
        if not alive and pods and all(p.metrics is not None for p in pods):
            serving = [p for p in pods if p.ejected_until <= now]
            return Filtered(serving or pods, degraded=True)
        serving = [p for p in alive if p.ejected_until <= now]
        return serving or alive


class FreshFilter(PluginBase):
    """Pods whose metrics are recent enough to trust (and whose last scrape succeeded).

    When only a minority of responding pods is fresh (e.g. the scraper lags under CPU pressure), the
    merely late ones are kept too, so the few fresh pods do not absorb the whole load. When no pod is
    fresh, it answers `degraded`: routing continues on in-flight counts alone instead of stalling.
    """

    def filter(self, ctx: SchedulingContext, pods: list[PodState]) -> list[PodState] | Filtered:
        oldest = ctx.now - ctx.staleness_s
        fresh = [
            p
            for p in pods
            if (m := p.metrics) is not None
            and m.scraped_at >= oldest
            and not p.stale
            and p.consecutive_failures == 0
        ]
        if len(fresh) == len(pods):
            return fresh
        ok = [p for p in pods if p.metrics is not None and not p.stale and p.consecutive_failures == 0]
        if fresh:
            return fresh if len(fresh) * 2 >= len(ok) else ok
        return Filtered(ok or pods, degraded=True)


class SaturationFilter(PluginBase):
    """Drops pods at or over the profile's queue or KV threshold; fails open if that is all of them.

    Thresholds apply to what the engine reported (TGI has no KV gauge: queue only); the profile's
    `saturation` sets them. Pods without metrics are not judged. Failing open, it answers `saturated`
    (the caller may queue or shed). When an earlier filter found the metrics untrustworthy
    (`ctx.degraded`) nothing is filtered and nothing is saturated, so stale scrapes never make the
    gateway hold traffic back.
    """

    def filter(self, ctx: SchedulingContext, pods: list[PodState]) -> list[PodState] | Filtered:
        if ctx.degraded:
            return pods
        qd = ctx.profile.queue_depth
        kvt = ctx.profile.kv_usage
        out = [
            p
            for p in pods
            if (m := p.metrics) is None or (m.waiting < qd and ((kv := m.kv_usage) is None or kv < kvt))
        ]
        if not out:
            return Filtered(pods, saturated=True)
        return out
