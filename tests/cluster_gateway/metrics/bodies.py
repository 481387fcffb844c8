"""Realistic `/metrics` bodies for vLLM, SGLang and TGI with chosen values of the signals.

Rendered by prometheus_client (what vLLM and SGLang use), with the engines' names, label sets and
some latency histograms around the signals, so the reader has to skip realistic noise.
"""

from __future__ import annotations

import random
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest

_TTFT = (0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0)
_E2E = (0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0, 50.0, 60.0)


@dataclass
class ModelLoad:
    waiting: int
    running: int
    kv: float


@dataclass
class LoraInfo:
    running: str
    waiting: str
    max_lora: int
    timestamp: float


@dataclass
class VllmState:
    models: Mapping[str, ModelLoad] = field(default_factory=lambda: {"llama": ModelLoad(3, 7, 0.42)})
    engines: int = 1  # data-parallel ranks: each model's load is reported per rank
    lora: Sequence[LoraInfo] = ()
    block_size: int = 16
    num_gpu_blocks: str = "27910"  # per rank; vLLM renders "None" before profiling finishes
    prefix_hits: float = 300.0
    prefix_queries: float = 1000.0
    legacy_names: bool = False  # vllm:gpu_cache_usage_perc and vllm:gpu_prefix_cache_*


def _noise(reg: CollectorRegistry, prefix: str, labels: Sequence[str], keys: Sequence[Sequence[str]]) -> None:
    rng = random.Random(1)
    ttft = Histogram(f"{prefix}time_to_first_token_seconds", "TTFT", labels, buckets=_TTFT, registry=reg)
    e2e = Histogram(f"{prefix}e2e_request_latency_seconds", "E2E latency", labels, buckets=_E2E, registry=reg)
    tokens = Counter(f"{prefix}prompt_tokens", "Prefill tokens", labels, registry=reg)
    for key in keys:
        for _ in range(20):
            ttft.labels(*key).observe(rng.expovariate(10))
            e2e.labels(*key).observe(rng.expovariate(0.5))
        tokens.labels(*key).inc(rng.randint(1, 10**6))


def vllm_body(state: VllmState | None = None) -> bytes:
    st = state or VllmState()
    reg = CollectorRegistry()
    lbl = ["model_name", "engine"]
    keys = [(m, str(e)) for m in st.models for e in range(st.engines)]
    _noise(reg, "vllm:", lbl, keys)
    running = Gauge("vllm:num_requests_running", "Requests in model execution batches.", lbl, registry=reg)
    waiting = Gauge("vllm:num_requests_waiting", "Requests waiting to be processed.", lbl, registry=reg)
    kv_name = "vllm:gpu_cache_usage_perc" if st.legacy_names else "vllm:kv_cache_usage_perc"
    kv = Gauge(kv_name, "KV-cache usage. 1 means 100 percent usage.", lbl, registry=reg)
    pfx = "vllm:gpu_prefix_cache_" if st.legacy_names else "vllm:prefix_cache_"
    queries = Counter(pfx + "queries", "Prefix cache queries (tokens).", lbl, registry=reg)
    hits = Counter(pfx + "hits", "Prefix cache hits (tokens).", lbl, registry=reg)
    for model, load in st.models.items():
        for e in range(st.engines):
            # The model's load is split over the ranks; each rank reports the same kv usage.
            running.labels(model, str(e)).set(load.running / st.engines)
            waiting.labels(model, str(e)).set(load.waiting / st.engines)
            kv.labels(model, str(e)).set(load.kv)
    first = keys[0]
    queries.labels(*first).inc(st.prefix_queries)
    hits.labels(*first).inc(st.prefix_hits)
    if st.lora:
        lora = Gauge(
            "vllm:lora_requests_info",
            "Running stats on lora requests.",
            ["max_lora", "waiting_lora_adapters", "running_lora_adapters"],
            registry=reg,
        )
        for info in st.lora:
            lora.labels(str(info.max_lora), info.waiting, info.running).set(info.timestamp)
    cache = Gauge(
        "vllm:cache_config_info",
        "Information of the LLMEngine CacheConfig",
        ["block_size", "cache_dtype", "enable_prefix_caching", "num_gpu_blocks", "engine"],
        registry=reg,
    )
    for e in range(st.engines):
        cache.labels(str(st.block_size), "auto", "True", st.num_gpu_blocks, str(e)).set(1)
    return generate_latest(reg)


def sglang_body(
    loads: Mapping[str, ModelLoad], page_size: int = 1, num_pages: int = 500_000, cache_hit_rate: float = 0.25
) -> bytes:
    reg = CollectorRegistry()
    lbl = ["model_name"]
    _noise(reg, "sglang:", lbl, [(m,) for m in loads])
    running = Gauge("sglang:num_running_reqs", "The number of running requests.", lbl, registry=reg)
    used = Gauge("sglang:num_used_tokens", "The number of used tokens.", lbl, registry=reg)
    usage = Gauge("sglang:token_usage", "The token usage.", lbl, registry=reg)
    gen = Gauge("sglang:gen_throughput", "The generation throughput (token/s).", lbl, registry=reg)
    queue = Gauge("sglang:num_queue_reqs", "The number of requests in the waiting queue.", lbl, registry=reg)
    hit = Gauge("sglang:cache_hit_rate", "The prefix cache hit rate.", lbl, registry=reg)
    for model, load in loads.items():
        running.labels(model).set(load.running)
        used.labels(model).set(int(load.kv * num_pages * page_size))
        usage.labels(model).set(load.kv)
        gen.labels(model).set(1234.5)
        queue.labels(model).set(load.waiting)
        hit.labels(model).set(cache_hit_rate)
    cfg = Gauge("sglang:cache_config_info", "Cache configuration.", ["page_size", "num_pages"], registry=reg)
    cfg.labels(str(page_size), str(num_pages)).set(1)
    return generate_latest(reg)


def tgi_body(queue: int, batch: int, max_tokens: int | None = 16384) -> bytes:
    """TGI's Rust exporter: TYPE lines without HELP, histograms with their own buckets."""
    lines = [
        "# TYPE tgi_request_count counter",
        "tgi_request_count 1234",
        "# TYPE tgi_request_success counter",
        "tgi_request_success 1200",
        "# TYPE tgi_queue_size gauge",
        f"tgi_queue_size {queue}",
        "# TYPE tgi_batch_current_size gauge",
        f"tgi_batch_current_size {batch}",
    ]
    if max_tokens is not None:
        lines += ["# TYPE tgi_batch_current_max_tokens gauge", f"tgi_batch_current_max_tokens {max_tokens}"]
    lines.append("# TYPE tgi_request_duration histogram")
    cumulative = 0
    for i, le in enumerate(("0.01", "0.025", "0.05", "0.1", "0.25", "0.5", "1", "2.5", "5", "10", "+Inf")):
        cumulative += i * 3
        lines.append(f'tgi_request_duration_bucket{{le="{le}"}} {cumulative}')
    lines += ["tgi_request_duration_sum 812.5", f"tgi_request_duration_count {cumulative}"]
    lines += ["# TYPE tgi_batch_inference_duration histogram"]
    for method in ("prefill", "decode"):
        for le in ("0.001", "0.01", "0.1", "1", "+Inf"):
            lines.append(f'tgi_batch_inference_duration_bucket{{method="{method}",le="{le}"}} 7')
    return ("\n".join(lines) + "\n").encode()
