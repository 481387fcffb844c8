"""Which cluster serves a request: filter the fleet snapshot, score what is left, rank it.

Filters: serves the model (or adapter), report not forgotten, not draining (cluster or operator), not
ejected (failing open to ejected clusters when nothing else is left: an ejection is a guess, an outage
is certain). Static stability: a report older than `staleAfterS` does not take its cluster out of
rotation — agents fall silent for reasons that leave the data plane intact (a busy machine, a
partition between agents and router, a restarted replica) — nor behind every fresh cluster: its
figures are aged toward caution (`staleness.py`: headroom x staleAfterS / age, a bounded TTFT
penalty). Only request failures (ejection) or silence beyond `forgetAfterS` remove it. Scorers
(each 0..1, registry below) are weighted per traffic class; headroom counts mostly up to
`selection.ampleHeadroom` requests (`HeadroomScorer`), so a near cluster with enough room beats a far
one with more, and capacity decides where the near one is short. Ranking is by tier
first — interactive traffic puts clusters predicted over its TTFT target last, and every class puts
clusters without room after those with room (so `batch`, weighted to cost, gets the cheapest cluster
that has room) — then by weighted score. Headroom is the reported one minus what this replica has sent
since that report, so a burst spreads instead of landing on the cluster that looked emptiest.
Predicted TTFT = reported estimate + queueing for requests beyond the headroom + client-region
latency + an adapter load when the requested LoRA adapter is resident on no pod of that cluster.
Cost is $ per million generated tokens: $/GPU-hour (spot inflated by `spotDiscountRisk`) /
(3600 x the model's reported `gpu_tokens_per_s`) x 1e6, since a cheap GPU that decodes slowly costs
more per token than a fast one. When any candidate reports no throughput (an older agent, or 0),
every candidate is costed in $/GPU-hour instead: the cost scorer compares ratios, never mixed units.
The candidates come from the fleet view's per-model index when the caller passes it, and a model
served by more than `selection.maxScored` clusters is decided over a short list (`shortlist.py`).
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable, Collection
from dataclasses import dataclass, field

from common.config.router import Selection, TrafficClassPolicy
from common.errors import OpenAIError, not_found_model, unavailable
from global_router.candidate_index import ModelCandidates
from global_router.cluster_scorers import CLUSTER_SCORERS, build_scorers, register_function
from global_router.dispatch_tracker import DispatchTracker
from global_router.fleet_view import ClusterState, ModelCapacity
from global_router.shortlist import shortlist
from global_router.staleness import StaleAging

MIN_TTFT_MS = 1.0


@dataclass(slots=True)
class SelectionRequest:
    model: str
    traffic_class: str = "interactive"
    client_region: str | None = None
    sheddable: bool = False


@dataclass(slots=True)
class Candidate:
    cluster: ClusterState
    capacity: ModelCapacity
    headroom: int  # reported headroom minus this replica's dispatches since the report
    predicted_ttft_ms: float
    network_ms: float
    cost: float  # $ per Mtok (or per GPU-hour, see `_price_per_token`), spot inflated by its risk
    over_target: bool = False
    stale: bool = False  # report older than staleAfterS: figures aged (staleness.py)
    score: float = 0.0
    parts: dict[str, float] = field(default_factory=dict)

    @property
    def cluster_id(self) -> str:
        return self.cluster.cluster_id

    @property
    def has_room(self) -> bool:
        return self.headroom > 0


@dataclass(slots=True)
class Ranking:
    candidates: list[Candidate]  # best first; the rest are failover targets
    saturated: bool  # no candidate has room
    policy: TrafficClassPolicy


class HeadroomScorer:
    """Room to take the request: mostly (1 - SPREAD) room up to `ample` requests, plus a SPREAD
    share of room relative to the roomiest candidate.

    Uncapped, a cluster that has served (its agent measured small requests: 110 slots) dwarfed idle
    ones still on their priors (8), and won every client region on headroom alone. Room beyond what
    the request (and the burst until the next report) needs does not make a cluster much better for
    it: at `ample` or more the capped part is whole, so region latency and TTFT decide; below it the
    shorter cluster loses in proportion, so capacity decides where a cluster is short. The small
    relative share keeps a burst spreading over otherwise equal clusters (each dispatch lowers a
    cluster's live headroom): without it any hair's difference elsewhere (a report a few ms older)
    sent a whole burst of 400 streams to one of two clusters with 5,000 free slots each. At its
    default weight (2 of 7) it moves a score by at most 0.2 / 7, less than any cross-region gap."""

    SPREAD = 0.1

    def __init__(self, ample: int) -> None:
        self.ample = max(1, ample)

    def score(self, cands: list[Candidate]) -> list[float]:
        top = max(max(c.headroom for c in cands), 1)
        capped_top = min(top, self.ample)
        out = []
        for c in cands:
            room = max(0, c.headroom)
            capped = min(1.0, room / capped_top)
            out.append((1.0 - self.SPREAD) * capped + self.SPREAD * min(1.0, room / top))
        return out


def _queue(cands: list[Candidate]) -> list[float]:
    queues = [c.capacity.queued + max(0, -c.headroom) for c in cands]
    top = max(queues)
    return [1.0 if top == 0 else 1.0 - q / top for q in queues]


def _ttft(cands: list[Candidate]) -> list[float]:
    best = min(c.predicted_ttft_ms for c in cands)
    return [best / c.predicted_ttft_ms for c in cands]


def _region(cands: list[Candidate]) -> list[float]:
    worst = max(c.network_ms for c in cands)
    return [1.0 if worst == 0 else 1.0 - c.network_ms / worst for c in cands]


def _cost(cands: list[Candidate]) -> list[float]:
    cheapest = min(c.cost for c in cands)
    return [1.0 if c.cost <= 0 else cheapest / c.cost for c in cands]


def _price_per_token(cands: list[Candidate]) -> None:
    """Turn every candidate's $/GPU-hour into $ per million tokens, or leave them all per GPU-hour
    when any lacks a throughput (one unit for all, or the cost scorer's ratios mean nothing)."""
    if not all(c.capacity.gpu_tokens_per_s > 0 for c in cands):
        return
    for c in cands:
        c.cost = c.cost / (3600.0 * c.capacity.gpu_tokens_per_s) * 1e6


# Built-in cluster scorer plugins (`cluster_scorers.py`); name = the `SelectionWeights` field weighing it.
CLUSTER_SCORERS.register("headroom", lambda name, params, sel: HeadroomScorer(sel.ample_headroom))
for _name, _fn in (
    ("queue", _queue),
    ("ttft", _ttft),
    ("region", _region),
    ("cost", _cost),
):
    register_function(_name, _fn)


def model_capacity(cluster: ClusterState, model: str) -> ModelCapacity | None:
    """The capacity serving `model`: a base model entry, or the base model holding that adapter."""
    mc = cluster.models.get(model)
    if mc is not None:
        return mc
    for cap in cluster.models.values():
        if model in cap.adapters:
            return cap
    return None


def served_models(cluster: ClusterState) -> set[str]:
    out = set(cluster.models)
    for cap in cluster.models.values():
        out |= cap.adapters
    return out


class ClusterSelector:
    def __init__(
        self,
        selection: Selection,
        *,
        stale_after_s: float,
        tracker: DispatchTracker,
        forget_after_s: float = 300.0,
        clock: Callable[[], float] = time.time,
        rng: random.Random | None = None,
    ) -> None:
        self._sel = selection
        self._stale_after_s = stale_after_s
        self._forget_after_s = max(forget_after_s, stale_after_s)
        self._aging = StaleAging(stale_after_s, selection.stale_penalty_ms)
        # Until then an unknown model is a 503 (reports may still be on their way), not a 404: see
        # `start_warmup`.
        self.warm_until = 0.0
        self._tracker = tracker
        self._clock = clock
        self._rng = rng or random.Random()
        default = TrafficClassPolicy()
        self._default_policy = selection.classes.get("interactive", default)
        self._scorers = build_scorers(selection)  # raises ConfigError for unknown plugins

    def policy(self, traffic_class: str) -> TrafficClassPolicy:
        return self._sel.classes.get(traffic_class, self._default_policy)

    def is_fresh(self, cluster: ClusterState, now: float | None = None) -> bool:
        return cluster.age(now if now is not None else self._clock()) <= self._stale_after_s

    def is_known(self, cluster: ClusterState, now: float | None = None) -> bool:
        """Not forgotten: the cluster is still routable on its last report (fresh or stale)."""
        return cluster.age(now if now is not None else self._clock()) <= self._forget_after_s

    def start_warmup(self, window_s: float) -> None:
        """The router just started: for `window_s` a model nobody reported yet is 503 + retry-after."""
        self.warm_until = self._clock() + window_s

    def routable(self, clusters: list[ClusterState], now: float | None = None) -> int:
        """How many clusters could take a request right now (for `/ready`)."""
        now = self._clock() if now is None else now
        return sum(
            1
            for c in clusters
            if self.is_known(c, now)
            and not c.draining
            and not c.router_drain
            and any(m.ready_pods > 0 for m in c.models.values())
        )

    def network_ms(self, client_region: str | None, cluster_region: str) -> float:
        if not client_region:
            return 0.0
        row = self._sel.region_latency_ms.get(client_region)
        if row is not None and cluster_region in row:
            return float(row[cluster_region])
        return 0.0 if client_region == cluster_region else self._sel.cross_region_latency_ms

    def _candidate(
        self,
        cluster: ClusterState,
        cap: ModelCapacity,
        req: SelectionRequest,
        now: float,
        room: dict[int, int],
    ) -> Candidate:
        age = cluster.age(now)
        stale = self._aging.is_stale(age)
        headroom = room.get(id(cap))  # the short list's walk computed it already, mostly
        if headroom is None:
            headroom = self._headroom_of(cluster, cap, now)  # aged when stale
        overflow = max(0, -headroom)
        # Each request beyond the reported headroom waits roughly one prefill turn per pod.
        per_request_ms = max(cap.est_ttft_ms, 50.0) / max(1, cap.ready_pods)
        net = self.network_ms(req.client_region, cluster.region)
        load = 0.0
        if req.model != cap.model and req.model not in cap.adapters_resident:
            load = self._sel.adapter_load_penalty_ms  # LoRA adapter not resident on any pod there
        predicted = max(
            MIN_TTFT_MS,
            cap.est_ttft_ms + overflow * per_request_ms + net + load + self._aging.ttft_penalty_ms(age),
        )
        cost = cluster.cost_per_gpu_hour
        if cluster.capacity_type == "spot":
            cost *= 1.0 + self._sel.spot_discount_risk
        # cost per GPU-hour until priced
        return Candidate(cluster, cap, headroom, predicted, net, cost, stale=stale)

    def rank(
        self,
        clusters: list[ClusterState],
        req: SelectionRequest,
        ejected: Collection[str] = (),
        candidates: ModelCandidates | None = None,
    ) -> Ranking:
        """Ranked candidates; raises 404 (nobody serves the model), 503 (nobody usable, or the router
        is starting and has no report yet) or 429 (shed).

        `candidates`: the fleet view's index entry for the model (`FleetView.candidates`), which
        spares the scan of every cluster and, past `selection.maxScored`, scores a short list."""
        now = self._clock()
        room: dict[int, int] = {}  # live headroom by id(capacity), computed once per decision
        serving = self._serving(clusters, req, now, ejected, candidates, room)
        if not serving:
            if not any(self.is_known(c, now) for c in clusters) or now < self.warm_until:
                raise OpenAIError(
                    503,
                    f"The router has no capacity report serving `{req.model}` yet (starting up or "
                    "reconnecting to its clusters); retry shortly.",
                    code="fleet_warming_up",
                    headers={"retry-after": "1"},
                )
            raise not_found_model(req.model)
        usable = [
            (c, cap) for c, cap in serving if not c.draining and not c.router_drain and cap.ready_pods > 0
        ]
        if not usable:
            raise unavailable(
                f"No healthy cluster can serve `{req.model}` right now (draining or no ready pods).",
                code="no_healthy_cluster",
            )
        healthy = [(c, cap) for c, cap in usable if c.cluster_id not in ejected]
        cands = [self._candidate(c, cap, req, now, room) for c, cap in (healthy or usable)]
        _price_per_token(cands)
        policy = self.policy(req.traffic_class)
        saturated = not any(c.has_room for c in cands)
        if saturated and req.sheddable:
            raise OpenAIError(
                429,
                "Every cluster serving this model is at capacity; sheddable traffic is refused first. "
                "Retry shortly.",
                code="fleet_saturated",
                headers={"retry-after": "1"},
            )
        target = policy.ttft_target_ms
        if len(cands) == 1:  # one cluster: scores would order nothing (a model served in one place)
            only = cands[0]
            only.over_target = target is not None and only.predicted_ttft_ms > target
            return Ranking(cands, saturated, policy)
        self._score(cands, policy)
        for c in cands:
            c.over_target = target is not None and c.predicted_ttft_ms > target
        jitter = {id(c): self._rng.random() for c in cands}
        # the SLO tier first (a late report must not send interactive traffic to a cluster predicted
        # over its target), then room, then score (a stale cluster competes on aged figures)
        cands.sort(key=lambda c: (c.over_target, not c.has_room, -c.score, jitter[id(c)]))
        return Ranking(cands, saturated, policy)

    def _serving(
        self,
        clusters: list[ClusterState],
        req: SelectionRequest,
        now: float,
        ejected: Collection[str],
        index: ModelCandidates | None,
        room: dict[int, int],
    ) -> list[tuple[ClusterState, ModelCapacity]]:
        """(cluster, capacity) of the known clusters serving the model: from the index when given
        (a short list when many serve it), else by a pass over the fleet."""
        if index is None:
            return [
                (c, cap)
                for c in clusters
                if self.is_known(c, now) and (cap := model_capacity(c, req.model)) is not None
            ]
        if 0 < self._sel.max_scored < len(index):
            per_order = max(1, self._sel.max_scored // 5)  # five orders: at most maxScored clusters
            short = shortlist(
                index,
                req.client_region,
                per_order,
                self._usable(now),
                self._live_room(now, room),
                ejected,
                self._rng,
            )
            if short:
                return short
        return [(c, cap) for c, cap in index.entries.values() if self.is_known(c, now)]

    def _usable(self, now: float) -> Callable[[ClusterState, ModelCapacity], bool]:
        oldest = now - self._forget_after_s  # is_known, without a call per cluster

        def usable(c: ClusterState, cap: ModelCapacity) -> bool:
            return cap.ready_pods > 0 and not c.draining and not c.router_drain and c.received_at >= oldest

        return usable

    def _live_room(self, now: float, room: dict[int, int]) -> Callable[[ClusterState, ModelCapacity], int]:
        """Live headroom for the short list, remembered in `room` for scoring the same decision."""

        def live(c: ClusterState, cap: ModelCapacity) -> int:
            r = room[id(cap)] = self._headroom_of(c, cap, now)
            return r

        return live

    def _headroom_of(self, cluster: ClusterState, cap: ModelCapacity, now: float) -> int:
        """Reported headroom (aged when the report is stale: `staleness.py`) minus this replica's
        dispatches since; used by scoring and by the short list alike."""
        since, inflight = self._tracker.pending(cluster.cluster_id, cluster.seq)
        return self._aging.headroom(
            cap.headroom_requests, now - cluster.received_at, dispatched_since=since, inflight=inflight
        )

    def _score(self, cands: list[Candidate], policy: TrafficClassPolicy) -> None:
        total_w = 0.0
        for scorer in self._scorers:
            w = scorer.weight_of(policy)
            if w <= 0:
                continue
            total_w += w
            for c, s in zip(cands, scorer.score(cands), strict=True):
                c.parts[scorer.name] = s
                c.score += w * s
        if total_w > 0:
            for c in cands:
                c.score /= total_w
