"""What each model-server engine exposes, and how it maps onto the engine-neutral `PodMetrics`.

One `EngineMapping` per engine in the `ENGINES` registry: the metric names to read (fed to the
targeted `common.promtext` reader, so a scrape parses only those lines), the names whose presence
identifies the engine in a body of unknown origin, and the mapping itself.

Multi-valued pods: queue/running counts are summed over samples (several `model_name` values, or
several data-parallel `engine` ranks); usage fractions are averaged (a DP pod balances internally,
so its mean usage is its headroom); block counts are summed over ranks.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Protocol

from cluster_gateway.pool import EngineType, PodMetrics
from common.promtext import FamilyReader, LineMemo, Sample, reader_for

Families = Mapping[str, list[Sample]]
# Latency/size figure → (sum, count) sample names to read it from, first present wins.
PerfSources = Mapping[str, tuple[tuple[str, str], ...]]
# Latency/size figure → cumulative (sum, count) since the pod started (see `PerfSources`).
PerfCounters = dict[str, tuple[float, float]]

__all__ = [
    "ENGINES",
    "EngineMapping",
    "MetricsMappingError",
    "PerfCounters",
    "PodSample",
    "PrefixCounters",
    "detect_engine",
    "fetch_names",
    "read_pod_metrics",
    "read_pod_sample",
]


class MetricsMappingError(ValueError):
    """The body lacks a required metric or holds an unusable value (the scrape counts as failed)."""


@dataclass(frozen=True, slots=True)
class PrefixCounters:
    """Cumulative prefix-cache counters (tokens), for a hit rate over a recent window."""

    hits: float
    queries: float


@dataclass(frozen=True, slots=True)
class PodSample:
    metrics: PodMetrics
    prefix: PrefixCounters | None  # None: the engine exposes no prefix-cache counters
    perf: PerfCounters | None  # latency/size histograms' cumulative (sum, count); None: not read


class EngineMapping(Protocol):
    engine: EngineType
    wanted: frozenset[str]  # metric names this mapping reads on every scrape (`perf` names: on request)
    signature: frozenset[str]  # any of these present ⇒ the body comes from this engine
    # counters fetched (not parsed) with `wanted` so that the filtered body of a pod taking requests
    # always moves: the frozen-metrics detector compares bodies (see frozen.py)
    liveness: frozenset[str]
    # of `wanted`, the names fetched only on the slow scrape (every `slowIntervalMs`): no routing
    # decision reads them fresher (fixed cache geometry, hit-rate counters), and each family asked
    # for costs the pod's render ~15-30 µs per scrape (the scraper keeps the last values between)
    slow_only: frozenset[str]
    perf: PerfSources  # figures for the capacity agent: ttft, queue, prefill, inference, e2e, itl,
    # prompt_tokens, output_tokens (each a mean per request or per token)

    def to_metrics(self, families: Families, scraped_at: float) -> PodMetrics: ...

    def prefix_counters(self, families: Families) -> PrefixCounters | None: ...


# --- value helpers ---------------------------------------------------------------------------


def _count(families: Families, name: str, *, required: bool = True) -> int:
    samples = families.get(name)
    if not samples:
        if required:
            raise MetricsMappingError(f"metric {name} missing from the body")
        return 0
    total = 0.0
    for s in samples:
        if not math.isfinite(s.value) or s.value < 0:
            raise MetricsMappingError(f"metric {name} has unusable value {s.value}")
        total += s.value
    return round(total)


def _fraction(families: Families, *names: str) -> float | None:
    """Mean of the first present name's finite samples, clamped to 0..1 (None if absent)."""
    for name in names:
        values = [s.value for s in families.get(name, ()) if math.isfinite(s.value)]
        if values:
            return min(1.0, max(0.0, sum(values) / len(values)))
    return None


def _sum(families: Families, *names: str) -> float | None:
    for name in names:
        samples = families.get(name)
        if samples:
            return sum(s.value for s in samples if math.isfinite(s.value))
    return None


def _int_label(value: str | None) -> int | None:
    try:
        return int(float(value)) if value is not None else None
    except ValueError:  # e.g. vLLM renders an unknown block count as "None"
        return None


def _hist(*names: str) -> tuple[tuple[str, str], ...]:
    return tuple((f"{n}_sum", f"{n}_count") for n in names)


def _perf_names(sources: PerfSources) -> frozenset[str]:
    return frozenset(n for pairs in sources.values() for pair in pairs for n in pair)


def perf_counters(families: Families, sources: PerfSources) -> PerfCounters:
    """Each figure's (sum, count) summed over samples (model names, DP ranks); absent figures omitted."""
    out: PerfCounters = {}
    for figure, pairs in sources.items():
        for sum_name, count_name in pairs:
            total, count = _sum(families, sum_name), _sum(families, count_name)
            if total is not None and count is not None:
                out[figure] = (total, count)
                break
    return out


def _adapters(value: str) -> frozenset[str]:
    return frozenset(a.strip() for a in value.split(",") if a.strip())


@dataclass(frozen=True, slots=True)
class _CacheGeometry:
    block_size: int | None
    num_blocks: int | None


def _cache_geometry(samples: list[Sample] | None, size_label: str, count_label: str) -> _CacheGeometry:
    """Block size from the first rank reporting it; block counts summed over ranks."""
    if not samples:
        return _CacheGeometry(None, None)
    sizes = [v for s in samples if (v := _int_label(s.labels.get(size_label))) is not None]
    counts = [v for s in samples if (v := _int_label(s.labels.get(count_label))) is not None]
    return _CacheGeometry(sizes[0] if sizes else None, sum(counts) if counts else None)


# --- engines ---------------------------------------------------------------------------------


class VllmMapping:
    engine: EngineType = "vllm"
    signature = frozenset({"vllm:num_requests_waiting", "vllm:num_requests_running"})
    perf: PerfSources = {
        "ttft": _hist("vllm:time_to_first_token_seconds"),
        "queue": _hist("vllm:request_queue_time_seconds"),
        "prefill": _hist("vllm:request_prefill_time_seconds"),
        "inference": _hist("vllm:request_inference_time_seconds"),
        "e2e": _hist("vllm:e2e_request_latency_seconds"),
        "itl": _hist("vllm:inter_token_latency_seconds", "vllm:time_per_output_token_seconds"),
        "prompt_tokens": _hist("vllm:request_prompt_tokens"),
        "output_tokens": _hist("vllm:request_generation_tokens"),
    }
    liveness = frozenset({"vllm:prompt_tokens_total"})  # one sample (success_total has three)
    wanted = signature | {
        "vllm:kv_cache_usage_perc",
        "vllm:gpu_cache_usage_perc",  # before vLLM 0.10
        "vllm:lora_requests_info",
        "vllm:cache_config_info",
        "vllm:prefix_cache_hits_total",
        "vllm:prefix_cache_queries_total",
        "vllm:gpu_prefix_cache_hits_total",  # v1 engine before the rename
        "vllm:gpu_prefix_cache_queries_total",
        "vllm:gpu_prefix_cache_hit_rate",  # v0 engine: a gauge
    }
    slow_only = frozenset(
        {
            "vllm:cache_config_info",
            "vllm:prefix_cache_hits_total",
            "vllm:prefix_cache_queries_total",
            "vllm:gpu_prefix_cache_hits_total",
            "vllm:gpu_prefix_cache_queries_total",
            "vllm:gpu_prefix_cache_hit_rate",
        }
    )

    def to_metrics(self, families: Families, scraped_at: float) -> PodMetrics:
        geometry = _cache_geometry(families.get("vllm:cache_config_info"), "block_size", "num_gpu_blocks")
        metrics = PodMetrics(
            engine=self.engine,
            waiting=_count(families, "vllm:num_requests_waiting"),
            running=_count(families, "vllm:num_requests_running"),
            kv_usage=_fraction(families, "vllm:kv_cache_usage_perc", "vllm:gpu_cache_usage_perc"),
            block_size=geometry.block_size,
            num_gpu_blocks=geometry.num_blocks,
            prefix_cache_hit_rate=self._prefix_hit_rate(families),
            scraped_at=scraped_at,
        )
        lora = families.get("vllm:lora_requests_info")
        if lora:
            # Each change of the adapter sets adds a sample whose value is its timestamp: newest wins.
            newest = max(lora, key=lambda s: s.value if math.isfinite(s.value) else -math.inf)
            metrics.running_adapters = _adapters(newest.labels.get("running_lora_adapters", ""))
            metrics.waiting_adapters = _adapters(newest.labels.get("waiting_lora_adapters", ""))
            metrics.max_lora = _int_label(newest.labels.get("max_lora")) or 0
        return metrics

    def prefix_counters(self, families: Families) -> PrefixCounters | None:
        queries = _sum(families, "vllm:prefix_cache_queries_total", "vllm:gpu_prefix_cache_queries_total")
        hits = _sum(families, "vllm:prefix_cache_hits_total", "vllm:gpu_prefix_cache_hits_total")
        return None if queries is None or hits is None else PrefixCounters(hits, queries)

    def _prefix_hit_rate(self, families: Families) -> float | None:
        """Lifetime hits/queries (token counts); None until the pod has answered a query.

        The scraper narrows this to a recent window from successive counter readings."""
        counters = self.prefix_counters(families)
        if counters is not None and counters.queries > 0:
            return min(1.0, max(0.0, counters.hits / counters.queries))
        return _fraction(families, "vllm:gpu_prefix_cache_hit_rate")


class SglangMapping:
    engine: EngineType = "sglang"
    signature = frozenset({"sglang:num_queue_reqs", "sglang:num_running_reqs"})
    perf: PerfSources = {
        "ttft": _hist("sglang:time_to_first_token_seconds"),
        "queue": _hist("sglang:queue_time_seconds"),
        "e2e": _hist("sglang:e2e_request_latency_seconds"),
        "itl": _hist("sglang:inter_token_latency_seconds"),
        "prompt_tokens": (("sglang:prompt_tokens_total", "sglang:num_requests_total"),),
        "output_tokens": (("sglang:generation_tokens_total", "sglang:num_requests_total"),),
    }
    liveness = frozenset({"sglang:prompt_tokens_total", "sglang:num_requests_total"})
    wanted = signature | {"sglang:token_usage", "sglang:cache_config_info", "sglang:cache_hit_rate"}
    slow_only = frozenset({"sglang:cache_config_info"})

    def to_metrics(self, families: Families, scraped_at: float) -> PodMetrics:
        geometry = _cache_geometry(families.get("sglang:cache_config_info"), "page_size", "num_pages")
        return PodMetrics(
            engine=self.engine,
            waiting=_count(families, "sglang:num_queue_reqs"),
            running=_count(families, "sglang:num_running_reqs"),
            kv_usage=_fraction(families, "sglang:token_usage"),
            block_size=geometry.block_size,
            num_gpu_blocks=geometry.num_blocks,
            prefix_cache_hit_rate=_fraction(families, "sglang:cache_hit_rate"),
            scraped_at=scraped_at,
        )

    def prefix_counters(self, families: Families) -> PrefixCounters | None:
        return None  # SGLang reports a hit-rate gauge, already recent


class TgiMapping:
    """TGI exposes no KV-cache or LoRA gauge: pods are scored on queue and batch size."""

    engine: EngineType = "tgi"
    signature = frozenset({"tgi_queue_size", "tgi_batch_current_size"})
    perf: PerfSources = {  # no TTFT/prefill histogram: prefill comes from the agent's fallback
        "queue": _hist("tgi_request_queue_duration"),
        "inference": _hist("tgi_request_inference_duration"),
        "e2e": _hist("tgi_request_duration"),
        "itl": _hist("tgi_request_mean_time_per_token_duration"),
        "prompt_tokens": _hist("tgi_request_input_length"),
        "output_tokens": _hist("tgi_request_generated_tokens"),
    }
    liveness = frozenset({"tgi_request_count"})  # TGI ignores filters: its whole body comes anyway
    wanted = signature | {"tgi_batch_current_max_tokens"}
    slow_only: frozenset[str] = frozenset()

    def to_metrics(self, families: Families, scraped_at: float) -> PodMetrics:
        max_tokens = families.get("tgi_batch_current_max_tokens")
        return PodMetrics(
            engine=self.engine,
            waiting=_count(families, "tgi_queue_size"),
            running=_count(families, "tgi_batch_current_size"),
            batch_max_tokens=_count(families, "tgi_batch_current_max_tokens") if max_tokens else None,
            scraped_at=scraped_at,
        )

    def prefix_counters(self, families: Families) -> PrefixCounters | None:
        return None


ENGINES: dict[EngineType, EngineMapping] = {
    "vllm": VllmMapping(),
    "sglang": SglangMapping(),
    "tgi": TgiMapping(),
}

_ANY_ENGINE: FamilyReader = reader_for(frozenset().union(*(m.wanted for m in ENGINES.values())))
# names read on a scrape that also reads the latency histograms, per engine (fixed: computed once)
_WITH_PERF: dict[EngineType, frozenset[str]] = {e: m.wanted | _perf_names(m.perf) for e, m in ENGINES.items()}
_ANY_ENGINE_PERF: FamilyReader = reader_for(frozenset().union(*_WITH_PERF.values()))


# the sample names a filtered scrape asks for (`?name[]=`): fast (every scrape: routing's), slow
# (every `slowIntervalMs`: also the `slow_only` names) and slow with the latency histograms'
# `_sum`/`_count` (never their buckets); engine None: every engine's
_FAST_FETCH: dict[EngineType, frozenset[str]] = {
    e: (m.wanted - m.slow_only) | m.liveness for e, m in ENGINES.items()
}
_SLOW_FETCH: dict[EngineType, frozenset[str]] = {e: m.wanted | m.liveness for e, m in ENGINES.items()}
_PERF_FETCH: dict[EngineType, frozenset[str]] = {e: _SLOW_FETCH[e] | _WITH_PERF[e] for e in ENGINES}
_ANY_FAST_FETCH = frozenset().union(*_FAST_FETCH.values())
_ANY_SLOW_FETCH = frozenset().union(*_SLOW_FETCH.values())
_ANY_PERF_FETCH = frozenset().union(*_PERF_FETCH.values())


def fetch_names(engine: EngineType | None, *, perf: bool, slow: bool | None = None) -> frozenset[str]:
    """Sample names to ask a pod for: what `read_pod_sample` reads plus the liveness counters.

    `slow` (default: `perf`) adds the engine's `slow_only` names; `perf` the latency sums/counts."""
    slow = perf if slow is None else slow or perf
    if engine is None:
        return _ANY_PERF_FETCH if perf else _ANY_SLOW_FETCH if slow else _ANY_FAST_FETCH
    return _PERF_FETCH[engine] if perf else _SLOW_FETCH[engine] if slow else _FAST_FETCH[engine]


def _detect(families: Families) -> EngineType | None:
    for engine, mapping in ENGINES.items():
        if any(name in families for name in mapping.signature):
            return engine
    return None


def detect_engine(body: bytes | str) -> EngineType | None:
    """The engine whose signature metrics the body carries, or None if none matches."""
    return _detect(_ANY_ENGINE.read(body))


def read_pod_sample(
    body: bytes | str,
    engine: EngineType | None,
    scraped_at: float,
    *,
    perf: bool = False,
    memo: LineMemo | None = None,
) -> PodSample:
    """Parse a `/metrics` body into PodMetrics (+ raw prefix counters); `engine=None` detects it.
    `perf` also reads the latency histograms' sums and counts (about 3x the parse time of a vLLM
    body, as every bucket line of those histograms is a near match: the scraper asks once a second).

    `memo`: the pod's line memo (see `FamilyReader.read`): unchanged lines are not parsed again.

    Raises MetricsMappingError (or common.promtext.PromTextError, also a ValueError) for a body
    that cannot be used.
    """
    if engine is None:
        families = (_ANY_ENGINE_PERF if perf else _ANY_ENGINE).read(body, memo)
        engine = _detect(families)
        if engine is None:
            raise MetricsMappingError("no vLLM, SGLang or TGI metrics in the body")
    else:
        families = reader_for(_WITH_PERF[engine] if perf else ENGINES[engine].wanted).read(body, memo)
    mapping = ENGINES[engine]
    return PodSample(
        mapping.to_metrics(families, scraped_at),
        mapping.prefix_counters(families),
        perf_counters(families, mapping.perf) if perf else None,
    )


def read_pod_metrics(body: bytes | str, engine: EngineType | None, scraped_at: float) -> PodMetrics:
    """`read_pod_sample(...).metrics`: the engine-neutral view of one body."""
    return read_pod_sample(body, engine, scraped_at).metrics
