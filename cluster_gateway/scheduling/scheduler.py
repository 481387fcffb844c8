"""One scheduling decision: pick the profile, filter the pool snapshot, score, rank.

Pure logic over `EndpointPool` state, no I/O, so the proxy and the ext_proc server call it inline on
the event loop. The core runs plugin hooks (`plugin.py`) in the order a profile's plan (`plans.py`)
lists them; what is kept between decisions belongs to the plugins (prefix index, adapter memory,
round-robin position), except the pool positions that find a pod in O(1).
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable
from typing import Any

from cluster_gateway.pool import EndpointPool, PodState
from cluster_gateway.scheduling.pickers import MAX_RANKED
from cluster_gateway.scheduling.plans import Hook, Plan, compile_plan
from cluster_gateway.scheduling.plugin import Filtered, SchedulingHandle
from cluster_gateway.scheduling.profiles import ProfileSelector, build_profiles
from cluster_gateway.scheduling.registry import PluginSet
from cluster_gateway.scheduling.two_stage import CandidateSampler
from cluster_gateway.scheduling.types import LLMRequest, ScheduleResult, SchedulingContext
from common.config.gateway import Scheduling
from common.errors import OpenAIError, unavailable
from common.plugins import has_hook

NO_HEALTHY = "no_healthy_endpoint"


class Scheduler:
    def __init__(
        self,
        pool: EndpointPool,
        config: Scheduling,
        *,
        staleness_s: float = 0.2,
        rng: random.Random | None = None,
        dead_after_failures: int = 3,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        """Raises `common.config.ConfigError` for unknown profiles, plugin names or plugin params.

        `dead_after_failures` should match `scrape.staleAfterMisses`: a pod whose scrapes failed that
        many times in a row is skipped even when routing has fallen back to in-flight counts.
        """
        self._pool = pool
        self._staleness_s = staleness_s
        self._dead_after = dead_after_failures
        self._clock = clock
        self._handle = SchedulingHandle(pool, config, clock, rng or random.Random(), dead_after_failures)
        profiles = build_profiles(config)
        self._selector = ProfileSelector(profiles, config)
        self._plugins = PluginSet(config, self._handle)
        self._plans = {name: compile_plan(spec, self._plugins) for name, spec in profiles.items()}
        built = self._plugins.seal()
        self._on_dispatch = _hooks(built, "on_dispatch")
        self._on_complete = _hooks(built, "on_complete")
        self._on_pods_changed = _hooks(built, "on_pods_changed")
        self._seen_version = -1
        self._seen_catalog = -1
        self._positions: dict[str, int] = {}
        self._all: list[PodState] = []
        self._sampler = CandidateSampler(pool, config.two_stage, self._handle.rng)

    def profile_names(self) -> list[str]:
        return self._selector.names()

    def plugin(self, name: str) -> object:
        """This scheduler's plugin instance named `name` (for inspection and tests); RuntimeError if
        no profile or plugin uses that name."""
        return self._plugins.get(name, "Scheduler.plugin")

    def schedule(self, req: LLMRequest) -> ScheduleResult:
        """Ranked pods for `req`.

        Raises OpenAIError 404 `model_not_found` when no pod serves the model or adapter, and 503
        `no_healthy_endpoint` when pods serve it but none is usable.
        """
        if self._pool.version != self._seen_version or self._pool.catalog.version != self._seen_catalog:
            self._pods_changed()
        pods = self._all
        if not pods:
            raise unavailable("No model-server pods have been discovered yet.", code=NO_HEALTHY)
        plan = self._plans[self._selector.select(req.profile, req.model).name]
        ctx = SchedulingContext(
            request=req,
            profile=plan.spec,
            now=self._clock(),
            staleness_s=self._staleness_s,
            dead_after_failures=self._dead_after,
            evidence=self._handle.evidence,
            pool_positions=self._positions,
            pool_version=self._seen_version,
            catalog=self._pool.catalog,
        )
        for prepare in plan.prepare:
            prepare(ctx, pods)
        if self._sampler.applies(plan, pods):
            pods, sampled = self._sampler.sample(ctx, plan, pods)
            if sampled:
                try:
                    res = self._decide(ctx, plan, req, pods)
                    if not (res.saturated or res.degraded):
                        return res
                except OpenAIError as e:
                    if e.status == 404:
                        raise
                ctx.degraded = False  # the sample could not decide: the whole pool does
                ctx.memo.clear()
                pods = self._all
        return self._decide(ctx, plan, req, pods)

    def _decide(
        self, ctx: SchedulingContext, plan: Plan, req: LLMRequest, pods: list[PodState]
    ) -> ScheduleResult:
        pods, serving, saturated = _filter(ctx, plan, pods)
        ctx.memo.clear()
        scorers, weight_sum = (
            (plan.degraded_scorers, plan.degraded_weight_sum)
            if ctx.degraded
            else (plan.scorers, plan.weight_sum)
        )
        totals, per_scorer = _weighted_totals(ctx, pods, scorers)
        ranked = plan.pick(ctx, list(zip(pods, totals, strict=True)))
        if len(ranked) < MAX_RANKED and len(serving) > len(ranked):
            ranked = self._with_last_resorts(ranked, serving)
        return ScheduleResult(
            pods=ranked,
            profile=plan.spec.name,
            saturated=saturated,
            scores=_scores_of(ctx.position(pods, ranked[0].name), totals, per_scorer, weight_sum),
            degraded=ctx.degraded,
            sheddable=req.sheddable or plan.spec.sheddable,
        )

    def on_dispatch(self, req: LLMRequest, pod: PodState) -> None:
        """The request is going to `pod` (the prefix index and adapter memory learn from it)."""
        for hook in self._on_dispatch:
            hook(req, pod)

    def on_complete(self, req: LLMRequest, pod: PodState, outcome: str) -> None:
        """The request sent to `pod` ended; `outcome` is the data path's word for how (e.g. "ok")."""
        for hook in self._on_complete:
            hook(req, pod, outcome)

    def _pods_changed(self) -> None:
        pods = self._all = self._pool.pods()
        for hook in self._on_pods_changed:
            hook(pods)
        self._positions = {p.name: i for i, p in enumerate(pods)}
        self._seen_version = self._pool.version
        self._seen_catalog = self._pool.catalog.version

    def _with_last_resorts(self, ranked: list[PodState], serving: list[PodState]) -> list[PodState]:
        """Pods the filters set aside (saturated, late metrics) still beat failing the request."""
        taken = {id(p) for p in ranked}
        dead = self._dead_after
        extra = [p for p in serving if id(p) not in taken and p.consecutive_failures < dead]
        extra.sort(key=lambda p: (p.consecutive_failures, p.inflight))
        return ranked + extra[: MAX_RANKED - len(ranked)]


def _hooks(plugins: list[object], hook: str) -> list[Hook]:
    return [getattr(p, hook) for p in plugins if has_hook(p, hook)]


def _filter(
    ctx: SchedulingContext, plan: Plan, pods: list[PodState]
) -> tuple[list[PodState], list[PodState], bool]:
    """(candidates, the last strict filter's pods for last resorts, whether all were saturated)."""
    serving = pods
    saturated = False
    for step in plan.filters:
        out: Any = step.run(ctx, pods)
        if isinstance(out, Filtered):
            ctx.degraded = ctx.degraded or out.degraded
            saturated = saturated or out.saturated
            out = out.pods
        if not out:
            raise unavailable(
                f"No usable pod for model `{ctx.request.model}` right now ({step.name} check failed on every pod).",
                code=NO_HEALTHY,
            )
        if step.strict:
            serving = out
        pods = out
    return pods, serving, saturated


def _weighted_totals(
    ctx: SchedulingContext, pods: list[PodState], scorers: list[tuple[float, str, Hook]]
) -> tuple[list[float], dict[str, list[float]]]:
    """Sum of weight * score per pod. A scorer that rates every candidate the same (a base-model request
    for `lora`, no cached prefix for `prefix`) cannot change the ranking: it is added as one
    constant instead of a pass over the pods."""
    per: dict[str, list[float]] = {}
    varying: list[tuple[float, list[float]]] = []
    offset = 0.0
    for w, name, score in scorers:
        sc = score(ctx, pods)
        per[name] = sc
        if sc.count(sc[0]) == len(sc):
            offset += w * sc[0]
        else:
            varying.append((w, sc))
    if not varying:
        return [offset] * len(pods), per
    # Two scorers per pass: at 1000 pods the loop overhead, not the arithmetic, is the cost.
    w0, first = varying[0]
    totals = [offset + w0 * x for x in first]
    for k in range(1, len(varying), 2):
        wa, a = varying[k]
        if k + 1 < len(varying):
            wb, b = varying[k + 1]
            totals = [t + wa * x + wb * y for t, x, y in zip(totals, a, b, strict=True)]
        else:
            totals = [t + wa * x for t, x in zip(totals, a, strict=True)]
    return totals, per


def _scores_of(
    i: int | None,
    totals: list[float],
    per: dict[str, list[float]],
    weight_sum: float,
) -> dict[str, float]:
    if i is None:
        return {"total": 0.0}  # chosen as a last resort, outside the scored candidates
    out = {name: sc[i] for name, sc in per.items()}
    out["total"] = totals[i] / weight_sum if weight_sum else 0.0
    return out
