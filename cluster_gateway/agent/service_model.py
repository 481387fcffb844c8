"""How fast a pod serves and how many requests it runs at once: the capacity agent's service model.

Service model: each pod is a server of C parallel slots; a request holds a slot for S seconds, so a
busy pod running n ≥ C finishes n / S requests a second. A new request's TTFT on a pod = prefill +
the longest of three waits before the engine admits it (the cluster's estimate is that of its best
unsaturated pod, as the gateway picks the best pod):
- the step in progress: half a mean step (ITL / 2) while the pod runs anything, as the engine
  admits between steps;
- a slot, only for the requests ahead (and this one) beyond the engine's room: (ahead + 1 - room) /
  rate. Room = what the engine admits now: up to its cap and, with a KV gauge, up to running / KV
  usage (the pool at the current per-request footprint, shared prefix blocks counted once), not the
  saturation threshold (a routing limit the engine ignores);
- the prompts ahead, prefilled first: ahead x drain.
Charging a slot wait whenever a request waited (one arriving mid-step) or running passed the 80% KV
slots computed from whole prompts over-predicted by 1.5-2.3x at moderate load on a simulated L4 pod
with shared system prompts, and leaving out the step in progress under-predicts an unqueued pod by
about a quarter (`fleetgate bench estimate`, bench/RESULTS.md).
drain = min(prefill, the pod's mean gap between
admissions over the window): prefill measured under load already spans the steps a prompt shares
with the others prefilled alongside it (chunked prefill batches several per step), so charging a
whole prefill per prompt ahead counts that sharing twice (one simulated L4 pod at 3.2 req/s: mean
estimate / measured TTFT 1.30 with it, 0.98 with the gap); both are upper bounds on the time each
queued prompt holds up the next, and under load, when queues form, the engine admits at its service
rate, so the admission gap is the tighter one. Each figure comes from the pod's own histograms
over the last 30 s (`PodMetrics.perf`, see `cluster_gateway.metrics.perf_window`), else the mean
over the model's other pods that measured it, else the spec's `capacity.podPerformance`, else a default:
- prefill: the prefill phase (vLLM), TTFT - queue time (SGLang), `prefillMs`, 80 ms;
- S: the running phase (vLLM, TGI), end-to-end - queue time (SGLang), else mean output tokens /
  decode rate; decode rate per sequence: 1 / inter-token latency, `decodeTokensPerSecond`, 40;
- C = min(KV-bound, cap). KV-bound: KV pool tokens (vLLM/SGLang cache geometry) / tokens per
  request (the larger of mean prompt + output, 1000 before any request, and what the running
  requests hold now); without the geometry, running / KV usage. Cap: the running count seen
  holding while requests waited with KV to spare (the engine's `max_num_seqs`, which no engine
  exports), `maxRunningRequests`, 256 (vLLM's default); TGI (no KV gauge) without either: 16.
Headroom = requests the ready pods can take before they saturate: free slots below the KV threshold
(and the cap) plus room in the queue below the depth threshold, minus requests dispatched since the
last scrape. tokens_per_second = running sequences x each pod's decode rate.
gpu_tokens_per_second = what one GPU generates when every slot runs (C x decode rate per pod, averaged
over ready pods and divided by GPUs per pod): Tier 2 divides $/GPU-hour by it to rank clusters by
cost per token, since a cheap GPU that decodes slowly can cost more per token than a fast one.
With no traffic and no `podPerformance`, pods of different speed look alike: only the KV pool tells
them apart, so set `capacity.podPerformance` for clusters whose pods are slow.

Idle pods keep what they measured. Real vLLM exports no `max_num_seqs`, so a cap learned under load
is all the agent knows of it; dropping it (and the speed figures) when traffic stops made an idle
cluster's headroom jump from 4 to 260 a pod and its tokens/s per GPU 35x, which the router's cost
ranking read as a cluster suddenly 35x cheaper. Instead each measured figure ages: for
`MEASURED_GRACE_S` after it was last seen it counts whole, then its weight w halves every
`capacity.measuredHalfLifeS` (default 30 min) and the figure used is measured^w x fallback^(1-w),
the fallback being what the pod would use had it never measured (podPerformance, else the
defaults above). Geometric, not linear: from a cap of 4 toward 256 the first half-life reaches 32,
not 130. The speed figures' age is the time since a request last finished on the pod; the cap's,
since it was last seen holding.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass

from cluster_gateway.pool import PodMetrics, PodPerf, PodState
from common.config.gateway import GatewaySpec, Saturation


@dataclass(frozen=True, slots=True)
class ServiceModel:
    """Fallbacks for what a pod has not measured yet (documented above); `service_model(spec)`
    applies the spec's `capacity.podPerformance`."""

    prefill_ms: float = 80.0  # TTFT of a request that starts at once
    decode_tokens_per_s: float = 40.0  # per running sequence
    mean_output_tokens: float = 200.0
    footprint_tokens: float = 1000.0  # KV tokens per request (prompt + output)
    default_concurrency: int = 16  # idle pods and engines without a KV gauge (TGI)
    max_concurrency: int = 256  # clamp for the KV-derived estimate (vLLM's default max_num_seqs)
    max_running: int | None = None  # the engines' configured cap, when the spec gives it
    measured_half_life_s: float = 1800.0  # how fast an idle pod's measured figures age (docstring)

    @property
    def service_s(self) -> float:
        return self.mean_output_tokens / self.decode_tokens_per_s


DEFAULT_SERVICE = ServiceModel()
MEASURED_GRACE_S = 120.0  # a measured figure counts whole this long after it was last seen


def measured_weight(age_s: float, half_life_s: float) -> float:
    """How much a figure measured `age_s` ago counts against the fallback (1 = whole)."""
    if age_s <= MEASURED_GRACE_S:
        return 1.0
    return 0.5 ** ((age_s - MEASURED_GRACE_S) / half_life_s)


def aged(measured: float | None, fallback: float, weight: float) -> float:
    """measured^w x fallback^(1-w): the measured figure while fresh, drifting to the fallback."""
    if measured is None or measured <= 0:
        return fallback
    if weight >= 1.0 or fallback <= 0:
        return measured
    return math.exp(weight * math.log(measured) + (1.0 - weight) * math.log(fallback))


def service_model(spec: GatewaySpec, base: ServiceModel = DEFAULT_SERVICE) -> ServiceModel:
    """`base` with the spec's `capacity.podPerformance` hints applied."""
    hint = spec.capacity.pod_performance
    return ServiceModel(
        prefill_ms=hint.prefill_ms or base.prefill_ms,
        decode_tokens_per_s=hint.decode_tokens_per_second or base.decode_tokens_per_s,
        mean_output_tokens=base.mean_output_tokens,
        footprint_tokens=base.footprint_tokens,
        default_concurrency=base.default_concurrency,
        max_concurrency=base.max_concurrency,
        max_running=hint.max_running_requests or base.max_running,
        measured_half_life_s=spec.capacity.measured_half_life_s,
    )


@dataclass(frozen=True, slots=True)
class PodSpeed:
    """One pod's service figures: measured where it has them, else the ServiceModel's."""

    prefill_s: float
    drain_s: float  # how long each queued prompt holds up the ones behind it (see the docstring)
    service_s: float  # a request's hold on a running slot
    decode_tokens_per_s: float  # per running sequence
    concurrency: float  # C: requests it runs at once at the current footprint
    slots: float  # requests it runs before saturating (KV threshold) or queueing (cap)
    admit_limit: float | None = None  # requests the engine runs before a new one waits (None: C)
    step_wait_s: float = 0.0  # expected rest of the engine step in progress (0: idle)


def gpu_tokens_per_second(speeds: Iterable[PodSpeed], gpus_per_pod: int) -> float:
    """Tokens/s one GPU generates with every slot busy: Σ C x decode rate over the ready pods,
    / (pods x GPUs per pod). 0 with no ready pod (unknown, not free)."""
    rates = [s.concurrency * s.decode_tokens_per_s for s in speeds]
    if not rates or gpus_per_pod < 1:
        return 0.0
    return sum(rates) / (len(rates) * gpus_per_pod)


def pooled_perf(pods: Iterable[PodState]) -> PodPerf:
    """The mean of each figure over the pods that measured it: what a pod that has not served yet
    (just started, or passed over) most likely measures, as pods serving one model usually run alike."""
    perfs = [p.metrics.perf for p in pods if p.metrics is not None and p.metrics.perf is not None]

    def mean(name: str) -> float | None:
        values = [v for perf in perfs if (v := getattr(perf, name)) is not None]
        return sum(values) / len(values) if values else None

    cap = mean("running_cap")
    capped = [perf.cap_age_s for perf in perfs if perf.running_cap is not None]
    return PodPerf(
        prefill_s=mean("prefill_s"),
        service_s=mean("service_s"),
        itl_s=mean("itl_s"),
        footprint_tokens=mean("footprint_tokens"),
        running_cap=round(cap) if cap is not None else None,
        speed_age_s=mean("speed_age_s") or 0.0,
        cap_age_s=sum(capped) / len(capped) if capped else 0.0,
    )


def _merge(own: PodPerf | None, pooled: PodPerf) -> PodPerf:
    if own is None:
        return pooled
    return PodPerf(
        prefill_s=own.prefill_s if own.prefill_s is not None else pooled.prefill_s,
        service_s=own.service_s if own.service_s is not None else pooled.service_s,
        itl_s=own.itl_s if own.itl_s is not None else pooled.itl_s,
        footprint_tokens=own.footprint_tokens
        if own.footprint_tokens is not None
        else pooled.footprint_tokens,
        running_cap=own.running_cap if own.running_cap is not None else pooled.running_cap,
        admit_gap_s=own.admit_gap_s,  # the pod's own queue only: a pod that admitted nothing has none
        speed_age_s=own.speed_age_s
        if own.itl_s is not None or own.service_s is not None
        else pooled.speed_age_s,
        cap_age_s=own.cap_age_s if own.running_cap is not None else pooled.cap_age_s,
    )


def pod_speed(
    m: PodMetrics, saturation: Saturation, svc: ServiceModel, pooled: PodPerf | None = None
) -> PodSpeed:
    """`pooled` (see `pooled_perf`) fills in figures the pod has not measured itself."""
    perf = _merge(m.perf, pooled) if pooled is not None else (m.perf or PodPerf())
    w = measured_weight(perf.speed_age_s, svc.measured_half_life_s)  # idle pods age: see the docstring
    decode = aged(1.0 / perf.itl_s if perf.itl_s else None, svc.decode_tokens_per_s, w)
    service = aged(perf.service_s, svc.mean_output_tokens / svc.decode_tokens_per_s, w)
    if not perf.service_s:
        service = svc.mean_output_tokens / decode
    prefill = aged(perf.prefill_s, svc.prefill_ms / 1000.0, w)
    kv_bound = _kv_bound(m, perf, svc)
    cap: float | None = svc.max_running
    if perf.running_cap:  # fractional while it ages: a whole-number step from 4 to 5 is a 25% jump
        fallback = svc.max_running or (
            svc.max_concurrency if kv_bound is not None else svc.default_concurrency
        )
        w_cap = measured_weight(perf.cap_age_s, svc.measured_half_life_s)
        cap = max(1.0, aged(float(perf.running_cap), float(fallback), w_cap))
    if kv_bound is not None:
        limit = float(cap or svc.max_concurrency)
        concurrency = min(limit, kv_bound)
        slots = min(limit, kv_bound * saturation.kv_usage)
    else:
        concurrency = float(cap or svc.default_concurrency)
        slots = concurrency * (saturation.kv_usage if m.kv_usage is not None else 1.0)
    drain = min(prefill, perf.admit_gap_s) if perf.admit_gap_s else prefill
    admit_limit = concurrency
    if m.kv_usage is not None and m.kv_usage > 0 and m.running > 0:
        admit_limit = min(float(cap or svc.max_concurrency), max(float(m.running), m.running / m.kv_usage))
    # A request arriving mid-step is admitted when the step ends: half a step on average (mean ITL
    # = mean step; longer prefill-carrying steps make the true mean residual somewhat larger).
    step_wait = 0.5 / decode if m.running > 0 or m.waiting > 0 else 0.0
    return PodSpeed(prefill, drain, service, decode, concurrency, slots, admit_limit, step_wait)


def _kv_bound(m: PodMetrics, perf: PodPerf, svc: ServiceModel) -> float | None:
    """Requests that fit in the pod's KV cache; None when the engine has no KV gauge.

    With the cache geometry: KV pool tokens / tokens per request, where a request takes the larger
    of the mean request's final size (measured, else the default) and what the running ones hold
    now (requests grow while they run, and vLLM allocates a prompt's blocks chunk by chunk).
    Without it: running / KV usage, the current footprint."""
    kv = m.kv_usage
    if kv is None:
        return None
    busy = kv > 0 and m.running > 0
    if not (m.block_size and m.num_gpu_blocks):
        return max(1.0, m.running / kv) if busy else None
    pool_tokens = float(m.block_size * m.num_gpu_blocks)
    current = kv * pool_tokens / m.running if busy else 0.0
    footprint = max(perf.footprint_tokens or svc.footprint_tokens, current)
    return max(1.0, pool_tokens / footprint)


def estimate_ttft_ms(
    speed: PodSpeed, waiting: float, running: int, dispatched: int, *, extra_ahead: float = 0.0
) -> float:
    """Prefill + the longest wait before admission (see above): the step in progress, a slot (for
    the requests beyond the engine's room), the prompts ahead drained.

    Ahead of a new request: those waiting plus the requests dispatched since the scrape beyond the
    room, plus `extra_ahead` (this pod's share of the requests held in the gateway's queue)."""
    limit = speed.admit_limit if speed.admit_limit is not None else speed.concurrency
    room = max(0.0, limit - running)
    ahead = waiting + extra_ahead + max(0.0, dispatched - room)
    # Requests finished per second when busy: a pod running more than C (shared prefix blocks
    # make requests smaller than whole prompts) frees its slots that much faster.
    rate = max(speed.concurrency, float(running)) / speed.service_s
    need_slot = max(0.0, ahead + 1 - room)  # requests (this one last) that must wait for a slot
    queueing_s = max(speed.step_wait_s, need_slot / rate, ahead * speed.drain_s)
    return (speed.prefill_s + queueing_s) * 1000.0
