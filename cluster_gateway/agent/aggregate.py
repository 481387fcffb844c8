"""The pool, folded into one capacity report per base model for Tier 2. Pure: no I/O.

Base models vs adapters come from each pod's catalog (`PodState.base_models` / `adapters`, parsed
from `/v1/models`, where vLLM gives every adapter its `parent`): a pod counts for each of its base
models, and an adapter sits under its parent (under every base of the pod when the parent is not
one of them). Only pods whose list did not tell adapters apart (`catalog_exact` False) are
classified by rule, relying on a model server serving one base model per pod:
1. a name some pod's catalog or any engine (running or waiting) reports as a LoRA adapter is one;
2. a pod left with a single other name has that name as its base model;
3. a pod left with several names whose only known base (from its catalog or step 2 on other pods)
   is one of them has that base, and the rest are adapters;
4. otherwise (e.g. every pod lists the same idle adapters, or aliases) each remaining name is
   reported as a model of its own: Tier 2 still routes correctly, since "served" means listed as a
   model or as an adapter, and the names fold under their base once an engine reports them.
A pod whose `/v1/models` is not known yet counts for the pool's base model when there is just one.

Per base model, over its *ready* pods (fresh metrics: not stale, scraped within `maxStalenessMs`):
saturated = waiting ≥ `saturation.queueDepth` or KV usage ≥ `saturation.kvUsage`; queued/running are
sums; kv_headroom is the mean of (1 - KV usage) over pods with a KV gauge (TGI has none: then the
share of unsaturated pods); adapters resident = the union of running adapters.

Pod speed and concurrency (TTFT, headroom, tokens/s per pod) come from the service model in
`cluster_gateway.agent.service_model`; the cluster's TTFT estimate is that of its best unsaturated
pod (the gateway picks the best pod), headroom and tokens/s are sums over its ready pods, and
gpu_tokens_per_second is the per-GPU throughput at full concurrency (for Tier 2's cost per token).

Requests held in the gateway's own admission queue (every pod saturated; `gateway_queued`, per
requested name, folded under its base model like the catalogs' adapters) are ahead of any new
request: they add to `queued`, come off headroom_requests, and are spread evenly over the model's
ready pods as extra requests ahead in each pod's TTFT estimate (the gateway hands them to whichever
pod frees up first). Without this a cluster holding 50 requests would still advertise its pods' room.
The queue's coarse level per name is part of `significant_state`, so its forming or clearing is
reported early rather than at the next interval.
"""

from __future__ import annotations

import math
import time
from bisect import bisect_right
from collections.abc import Iterable, Mapping
from collections.abc import Set as AbstractSet
from dataclasses import dataclass, field, replace

from google.protobuf.timestamp_pb2 import Timestamp

from cluster_gateway.agent.service_model import (
    PodSpeed,
    ServiceModel,
    estimate_ttft_ms,
    gpu_tokens_per_second,
    pod_speed,
    pooled_perf,
    service_model,
)
from cluster_gateway.pool import EndpointPool, PodPerf, PodState
from common.config.gateway import GatewaySpec, Saturation
from common.proto.fleetgate.v1 import capacity_pb2


@dataclass(slots=True)
class _PodView:
    """What the report needs from one ready pod."""

    waiting: int
    running: int
    kv_usage: float | None
    running_adapters: frozenset[str]
    dispatched: int
    saturated: bool
    headroom: int
    ttft_ms: float
    tokens_per_s: float
    speed: PodSpeed


def _with_gateway_queue(pod: _PodView, ahead: float) -> _PodView:
    """`pod` with `ahead` more requests queued in front of a new one (held in the gateway)."""
    if ahead <= 0:
        return pod
    ttft = estimate_ttft_ms(pod.speed, pod.waiting, pod.running, pod.dispatched, extra_ahead=ahead)
    return replace(pod, ttft_ms=max(pod.ttft_ms, ttft))


@dataclass(slots=True)
class _ModelAgg:
    pods: list[_PodView] = field(default_factory=list)
    adapters_available: set[str] = field(default_factory=set)
    gateway_queued: int = 0  # held in the gateway's admission queue


def fold_gateway_queue(queued: Mapping[str, int], bases: Mapping[str, AbstractSet[str]]) -> dict[str, int]:
    """Requests queued in the gateway per requested name -> per base model (`bases`: base → its
    adapters). An adapter counts under the first base (by name) that serves it; with a single base
    model every name counts under it; otherwise a name no ready pod serves is dropped (the gateway
    rejects unknown models before queueing; a base with no ready pod has nothing to report)."""
    out: dict[str, int] = {}
    sole = next(iter(bases)) if len(bases) == 1 else None
    for name, n in queued.items():
        if n <= 0:
            continue
        base = name if name in bases else next((b for b in sorted(bases) if name in bases[b]), sole)
        if base is not None:
            out[base] = out.get(base, 0) + n
    return out


def default_saturation(spec: GatewaySpec) -> Saturation:
    """The default routing profile's thresholds (Tier 1 and Tier 2 then agree on 'saturated')."""
    profile = spec.scheduling.profiles.get(spec.scheduling.default_profile)
    return profile.saturation if profile is not None else Saturation()


def gateway_url(spec: GatewaySpec) -> str:
    return spec.public_url or f"http://{spec.host}:{spec.port}"


def is_ready(pod: PodState, max_staleness_s: float, now: float) -> bool:
    return (
        not pod.stale
        and pod.metrics is not None
        and pod.metrics_age(now) <= max_staleness_s
        and pod.ejected_until <= now  # outlier detection took it out: its requests fail
    )


def is_saturated(pod: PodState, saturation: Saturation) -> bool:
    m = pod.metrics
    if m is None:
        return False
    return m.waiting >= saturation.queue_depth or (
        m.kv_usage is not None and m.kv_usage >= saturation.kv_usage
    )


def known_adapters(pods: Iterable[PodState]) -> set[str]:
    """Names listed as adapters by a pod's catalog or reported as running/waiting LoRA by an engine."""
    names: set[str] = set()
    for pod in pods:
        names |= pod.adapters
        if pod.metrics is not None:
            names |= pod.metrics.running_adapters | pod.metrics.waiting_adapters
    return names


def classify_models(pods: list[PodState]) -> list[dict[str, AbstractSet[str]]]:
    """For each pod (same order): each base model it serves → the adapters it serves on that base
    (module docstring). Pods whose models are unknown get {}; `build_report` decides what they count for.
    """
    out: list[dict[str, AbstractSet[str]]] = [
        _exact_bases(p) if p.catalog_exact and p.models else {} for p in pods
    ]
    inexact = [i for i, p in enumerate(pods) if p.models and not p.catalog_exact]
    if not inexact:
        return out
    adapters = known_adapters(pods)
    candidates = {i: pods[i].models - adapters for i in inexact}
    known_bases = {b for p in pods if p.catalog_exact for b in p.base_models}
    known_bases |= {next(iter(c)) for c in candidates.values() if len(c) == 1}
    for i in inexact:
        cands = candidates[i]
        listed = pods[i].models & adapters
        if len(cands) > 1:
            hits = cands & known_bases
            if len(hits) == 1:
                listed |= cands - hits
                cands = hits
        out[i] = dict.fromkeys(cands, listed)
    return out


def _exact_bases(pod: PodState) -> dict[str, AbstractSet[str]]:
    if len(pod.base_models) == 1:  # the usual vLLM pod: every adapter sits on its one base model
        return dict.fromkeys(pod.base_models, pod.adapters)
    parents = pod.adapter_parents
    bases: dict[str, set[str]] = {b: set() for b in pod.base_models}
    if not bases:  # only adapters listed: their parents are the pod's base models
        bases = {parents[a]: set() for a in pod.adapters if a in parents}
    for adapter in pod.adapters:
        parent = parents.get(adapter)
        if parent is not None and parent in bases:
            bases[parent].add(adapter)
        else:
            for names in bases.values():
                names.add(adapter)
    return dict(bases)


def _pod_view(pod: PodState, saturation: Saturation, svc: ServiceModel, pooled: PodPerf) -> _PodView:
    m = pod.metrics
    assert m is not None
    speed = pod_speed(m, saturation, svc, pooled)
    saturated = is_saturated(pod, saturation)
    if saturated:
        headroom = 0
    else:
        slot_room = max(0, math.floor(speed.slots) - m.running)
        queue_room = max(0, saturation.queue_depth - 1 - m.waiting)
        headroom = max(0, slot_room + queue_room - pod.dispatched_since_scrape)
    return _PodView(
        waiting=m.waiting,
        running=m.running,
        kv_usage=m.kv_usage,
        running_adapters=m.running_adapters,
        dispatched=pod.dispatched_since_scrape,
        saturated=saturated,
        headroom=headroom,
        ttft_ms=estimate_ttft_ms(speed, m.waiting, m.running, pod.dispatched_since_scrape),
        tokens_per_s=m.running * speed.decode_tokens_per_s,
        speed=speed,
    )


def _model_capacity(name: str, agg: _ModelAgg, gpus_per_pod: int) -> capacity_pb2.ModelCapacity:
    held = agg.gateway_queued
    pods = [_with_gateway_queue(p, held / len(agg.pods)) for p in agg.pods] if held else agg.pods
    resident: set[str] = set()
    for p in pods:
        resident |= p.running_adapters
    with_kv = [p.kv_usage for p in pods if p.kv_usage is not None]
    if with_kv:
        kv_headroom = sum(1.0 - min(1.0, max(0.0, kv)) for kv in with_kv) / len(with_kv)
    elif pods:
        kv_headroom = sum(1 for p in pods if not p.saturated) / len(pods)
    else:
        kv_headroom = 0.0
    unsaturated = [p.ttft_ms for p in pods if not p.saturated]
    if unsaturated:
        est_ttft = min(unsaturated)
    elif pods:
        est_ttft = min(p.ttft_ms for p in pods)
    else:
        est_ttft = 0.0  # no ready pod: ready_pods = 0 says it all
    return capacity_pb2.ModelCapacity(
        model=name,
        ready_pods=len(pods),
        saturated_pods=sum(1 for p in pods if p.saturated),
        queued=sum(p.waiting for p in pods) + held,
        running=sum(p.running for p in pods),
        kv_headroom=kv_headroom,
        adapters_resident=sorted(resident),
        adapters_available=sorted(agg.adapters_available | resident),
        est_ttft_ms=est_ttft,
        tokens_per_second=sum(p.tokens_per_s for p in pods),
        gpu_tokens_per_second=gpu_tokens_per_second((p.speed for p in pods), gpus_per_pod),
        headroom_requests=max(0, sum(p.headroom for p in pods) - held),
    )


def build_report(
    spec: GatewaySpec,
    pool: EndpointPool,
    seq: int,
    saturation: Saturation,
    *,
    service: ServiceModel | None = None,
    now: float | None = None,
    wall_time: float | None = None,
    url: str | None = None,
    gateway_queued: Mapping[str, int] | None = None,
) -> capacity_pb2.CapacityReport:
    """One report for the whole pool; `now` is monotonic (as `PodMetrics.scraped_at`); `url`
    overrides the gateway URL derived from the spec (e.g. the port actually bound); `service`
    defaults to `service_model(spec)`; `gateway_queued`: requests waiting in the gateway's
    admission queue per requested model name (module docstring)."""
    now = time.monotonic() if now is None else now
    service = service_model(spec) if service is None else service
    pods = pool.pods()
    bases_by_pod = classify_models(pods)
    all_bases = {b for bases in bases_by_pod for b in bases}
    sole_base: dict[str, AbstractSet[str]] = (
        {next(iter(all_bases)): frozenset()} if len(all_bases) == 1 else {}
    )
    max_staleness_s = spec.scrape.max_staleness_ms / 1000.0

    ready: dict[str, list[tuple[PodState, AbstractSet[str]]]] = {name: [] for name in all_bases}
    for pod, pod_bases in zip(pods, bases_by_pod, strict=True):
        bases = pod_bases or (sole_base if not pod.models else {})
        if bases and is_ready(pod, max_staleness_s, now):
            for base, adapters in bases.items():
                ready[base].append((pod, adapters))
    per_model: dict[str, _ModelAgg] = {}
    for base, members in ready.items():
        agg = per_model[base] = _ModelAgg()
        pooled = pooled_perf(pod for pod, _ in members)  # a model's pods usually run on one GPU type
        for pod, adapters in members:
            agg.pods.append(_pod_view(pod, saturation, service, pooled))
            agg.adapters_available |= adapters
    if gateway_queued:
        bases = {
            name: agg.adapters_available.union(*(p.running_adapters for p in agg.pods))
            for name, agg in per_model.items()
            if agg.pods
        }
        for base, n in fold_gateway_queue(gateway_queued, bases).items():
            per_model[base].gateway_queued = n

    report = capacity_pb2.CapacityReport(
        cluster_id=spec.cluster_id,
        region=spec.region,
        zone=spec.zone,
        gateway_url=url or gateway_url(spec),
        sequence=seq,
        sent_at=_timestamp(time.time() if wall_time is None else wall_time),
        models=[
            _model_capacity(name, per_model[name], spec.capacity.gpus_per_pod) for name in sorted(per_model)
        ],
        cost_per_gpu_hour=spec.capacity.cost_per_gpu_hour,
        gpus=len(pods) * spec.capacity.gpus_per_pod,
        capacity_type=(
            capacity_pb2.CAPACITY_TYPE_SPOT
            if spec.capacity.capacity_type == "spot"
            else capacity_pb2.CAPACITY_TYPE_ON_DEMAND
        ),
        draining=spec.capacity.draining,
    )
    return report


PodSignature = tuple[str, bool, bool, frozenset[str], frozenset[str]]

# Lower bounds of the gateway queue's levels: 0, 1-3, 4-15, 16-63, 64+ held requests.
GATEWAY_QUEUE_LEVELS = (1, 4, 16, 64)


def gateway_queue_level(depth: int) -> int:
    """A coarse level of a gateway queue's depth, for `significant_state`. Going from 0 to 1 matters
    most (every pod of the model is saturated: the cluster has no room at all); beyond that the levels
    grow by 4x, so a queue building up re-reports a few times as Tier 2's view of it goes stale by a
    sizeable factor, while depth moving by ±1 inside a level (requests arriving and leaving at the
    same pace) changes nothing. Jitter across a boundary is left to the agent's `min_early_gap_s`."""
    return bisect_right(GATEWAY_QUEUE_LEVELS, depth)


@dataclass(frozen=True, slots=True)
class SignificantState:
    """What changes Tier 2's decisions. `pods`: per pod, name / ready / saturated / served models /
    which of them are adapters. `gateway_queue`: per requested name (model or adapter, as the gateway
    queues them) the level of requests held in its admission queue, names with none left out."""

    pods: frozenset[PodSignature]
    gateway_queue: frozenset[tuple[str, int]] = frozenset()


def significant_state(
    pool: EndpointPool,
    saturation: Saturation,
    max_staleness_s: float,
    now: float | None = None,
    *,
    gateway_queued: Mapping[str, int] | None = None,
) -> SignificantState:
    """An agent sends an early report when this differs from the value at its last report.
    `gateway_queued` is the admission queue's depth per requested name (as for `build_report`); it is
    not folded under base models here, so a check stays cheap and needs no pod catalogs."""
    now = time.monotonic() if now is None else now
    pods = frozenset(
        (
            pod.name,
            ready := is_ready(pod, max_staleness_s, now),
            ready and is_saturated(pod, saturation),
            pod.models,
            pod.adapters,
        )
        for pod in pool.pods()
    )
    levels = ((name, gateway_queue_level(n)) for name, n in (gateway_queued or {}).items())
    return SignificantState(pods, frozenset((name, lvl) for name, lvl in levels if lvl > 0))


def _timestamp(unix_s: float) -> Timestamp:
    ts = Timestamp()
    ts.FromNanoseconds(int(unix_s * 1e9))
    return ts
