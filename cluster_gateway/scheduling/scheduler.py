"""One scheduling decision: pick the profile, filter the pool snapshot, score, rank.

Pure logic over `EndpointPool` state, no I/O, so the proxy and the ext_proc server call it inline on
the event loop. The only state kept between decisions is what the gateway itself caused: the prefix
index (where prompts were sent), recently dispatched adapters, and round-robin positions.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable
from dataclasses import dataclass

from cluster_gateway.pool import EndpointPool, PodState
from cluster_gateway.scheduling import registry
from cluster_gateway.scheduling.adapter_memory import AdapterMemory
from cluster_gateway.scheduling.pickers import MAX_RANKED
from cluster_gateway.scheduling.prefix_index import PrefixIndex
from cluster_gateway.scheduling.profiles import ProfileSelector, ProfileSpec, build_profiles
from cluster_gateway.scheduling.scorers import InflightScorer
from cluster_gateway.scheduling.types import (
    Filter,
    LLMRequest,
    Picker,
    ScheduleResult,
    SchedulingContext,
    Scorer,
)
from common.config.gateway import Scheduling
from common.errors import unavailable

NO_HEALTHY = "no_healthy_endpoint"


@dataclass(slots=True)
class _Plan:
    """A profile compiled to plug-in instances."""

    spec: ProfileSpec
    filters: list[Filter]
    scorers: list[tuple[float, Scorer]]
    picker: Picker
    weight_sum: float


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
        """Raises `common.config.ConfigError` for unknown profiles or plug-in names in `config`.

        `dead_after_failures` should match `scrape.staleAfterMisses`: a pod whose scrapes failed that
        many times in a row is skipped even when routing has fallen back to in-flight counts.
        """
        self._pool = pool
        self._config = config
        self._staleness_s = staleness_s
        self._dead_after = dead_after_failures
        self._clock = clock
        rng = rng or random.Random()
        profiles = build_profiles(config)
        self._selector = ProfileSelector(profiles, config)
        scorer_instances: dict[str, Scorer] = {}

        def scorer(name: str) -> Scorer:
            s = scorer_instances.get(name)
            if s is None:
                s = scorer_instances[name] = registry.SCORERS[name]()
            return s

        self._plans = {
            name: _Plan(
                spec=spec,
                filters=[registry.FILTERS[f]() for f in spec.filters],
                scorers=[(w, scorer(s)) for s, w in spec.weights.items()],
                picker=registry.PICKERS[spec.picker](rng),
                weight_sum=sum(spec.weights.values()),
            )
            for name, spec in profiles.items()
        }
        self._degraded_scorers: list[tuple[float, Scorer]] = [(1.0, InflightScorer())]
        pc = config.prefix_cache
        self._block_chars = pc.block_chars
        self._max_prefix_blocks = pc.max_prefix_blocks
        self.prefix_index = PrefixIndex(pc.max_blocks_per_pod)
        self.adapters = AdapterMemory()
        self._seen_version = -1
        self._positions: dict[str, int] = {}

    def profile_names(self) -> list[str]:
        return self._selector.names()

    def schedule(self, req: LLMRequest) -> ScheduleResult:
        """Ranked pods for `req`.

        Raises OpenAIError 404 `model_not_found` when no pod serves the model or adapter, and 503
        `no_healthy_endpoint` when pods serve it but none is usable.
        """
        if self._pool.version != self._seen_version:
            self._forget_departed()
        pods = self._pool.pods()
        if not pods:
            raise unavailable("No model-server pods have been discovered yet.", code=NO_HEALTHY)
        plan = self._plans[self._selector.select(req.profile, req.model).name]
        ctx = SchedulingContext(
            request=req,
            profile=plan.spec,
            now=self._clock(),
            staleness_s=self._staleness_s,
            dead_after_failures=self._dead_after,
            prefix_index=self.prefix_index,
            block_chars=self._block_chars,
            max_prefix_blocks=self._max_prefix_blocks,
            adapters=self.adapters,
            pool_positions=self._positions,
            pool_version=self._seen_version,
            catalog=self._pool.catalog,
        )
        serving = pods
        for f in plan.filters:
            pods = f.filter(ctx, pods)
            if not pods:
                raise unavailable(
                    f"No usable pod for model `{req.model}` right now ({f.name} check failed on every pod).",
                    code=NO_HEALTHY,
                )
            if f.name == "model":
                serving = pods
        ctx.memo.clear()
        scorers = self._degraded_scorers if ctx.degraded else plan.scorers
        totals, per_scorer = _weighted_totals(ctx, pods, scorers)
        ranked = plan.picker.pick(ctx, list(zip(pods, totals, strict=True)))
        if len(ranked) < MAX_RANKED and len(serving) > len(ranked):
            ranked = self._with_last_resorts(ranked, serving)
        scores = _scores_of(
            ctx.position(pods, ranked[0].name),
            totals,
            per_scorer,
            plan.weight_sum if not ctx.degraded else 1.0,
        )
        return ScheduleResult(
            pods=ranked,
            profile=plan.spec.name,
            saturated=ctx.saturated,
            scores=scores,
            degraded=ctx.degraded,
            sheddable=req.sheddable or plan.spec.sheddable,
        )

    def on_dispatch(self, req: LLMRequest, pod: PodState) -> None:
        """The request is going to `pod`: from now on that pod likely caches its prompt's blocks."""
        hashes = req.block_hashes(self._block_chars, self._max_prefix_blocks)
        if hashes:
            self.prefix_index.add(pod.name, hashes)
        m = pod.metrics
        cat = self._pool.catalog
        if m is not None and m.max_lora and (cat.is_adapter(req.model) or not cat.exact):
            self.adapters.record(pod.name, req.model, self._clock())

    def _forget_departed(self) -> None:
        pods = self._pool.pods()
        names = {p.name for p in pods}
        self.prefix_index.retain_pods(names)
        self.adapters.retain_pods(names)
        self._positions = {p.name: i for i, p in enumerate(pods)}
        self._seen_version = self._pool.version

    def _with_last_resorts(self, ranked: list[PodState], serving: list[PodState]) -> list[PodState]:
        """Pods the filters set aside (saturated, late metrics) still beat failing the request."""
        taken = {id(p) for p in ranked}
        dead = self._dead_after
        extra = [p for p in serving if id(p) not in taken and p.consecutive_failures < dead]
        extra.sort(key=lambda p: (p.consecutive_failures, p.inflight))
        return ranked + extra[: MAX_RANKED - len(ranked)]


def _weighted_totals(
    ctx: SchedulingContext, pods: list[PodState], scorers: list[tuple[float, Scorer]]
) -> tuple[list[float], dict[str, list[float]]]:
    """Sum of weight * score per pod. A scorer that rates every candidate the same (a base-model request
    for `lora`, no cached prefix for `prefix`) cannot change the ranking: it is added as one
    constant instead of a pass over the pods."""
    per: dict[str, list[float]] = {}
    varying: list[tuple[float, list[float]]] = []
    offset = 0.0
    for w, s in scorers:
        sc = s.score(ctx, pods)
        per[s.name] = sc
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
