"""/metrics bodies in the exact names and labels vLLM, SGLang and TGI expose.

Gauges are rendered from live engine state on every scrape (so they are at most one step old);
the long histogram/counter section changes only when a request advances, so it is cached per
stats version: a fleet of pods scraped every 50 ms stays cheap.

`render(names)` honours `?name[]=` filters as prometheus_client (hence vLLM and SGLang) does: only
the samples of those exact sample names, with their family's HELP/TYPE lines; TGI's exporter
ignores the query, and so does the TGI format here.
"""

from __future__ import annotations

import time
import weakref
from collections.abc import Callable

from modelsim.engine import Engine
from modelsim.histogram import Histogram, fmt

SlowPart = Callable[[Engine], str]
FastPart = Callable[[Engine], str]


class _Cached:
    """Per-engine cache of the slow part of the body, whole and per name filter."""

    def __init__(self) -> None:
        self.version = -1
        self.stats: object = None
        self.text = ""
        self.filtered: dict[frozenset[str], str] = {}

    def get(self, engine: Engine, build: Callable[[Engine], str], names: frozenset[str] | None) -> str:
        st = engine.stats
        if st.version != self.version or st is not self.stats:
            self.text = build(engine)
            self.version = st.version
            self.stats = st
            self.filtered.clear()
        if names is None:
            return self.text
        text = self.filtered.get(names)
        if text is None:
            if len(self.filtered) >= 16:  # a client cycling through filters cannot grow this
                self.filtered.clear()
            text = self.filtered[names] = filter_samples(self.text, names)
        return text


def filter_samples(text: str, names: frozenset[str]) -> str:
    """Only the sample lines whose sample name is in `names`, each family's comments before its
    first kept sample (prometheus_client's `restricted_registry` output, family by family)."""
    out: list[str] = []
    comments: list[str] = []
    for line in text.splitlines():
        if line.startswith("#"):
            if line.startswith("# HELP"):
                comments = []
            comments.append(line)
            continue
        end = len(line)
        for sep in ("{", " "):
            i = line.find(sep)
            if 0 <= i < end:
                end = i
        if line[:end] in names:
            out.extend(comments)
            comments = []
            out.append(line)
    return "\n".join(out) + "\n" if out else ""


def _esc(v: str) -> str:
    return v.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def _gauge(out: list[str], name: str, help_text: str, labels: str, value: float) -> None:
    out.append(f"# HELP {name} {help_text}")
    out.append(f"# TYPE {name} gauge")
    out.append(f"{name}{{{labels}}} {fmt(value)}")


def _counter(out: list[str], name: str, help_text: str, samples: list[tuple[str, float]]) -> None:
    base = name.removesuffix("_total")
    out.append(f"# HELP {base} {help_text}")
    out.append(f"# TYPE {base} counter")
    for labels, v in samples:
        out.append(f"{name}{{{labels}}} {fmt(v)}")


# -- vLLM ---------------------------------------------------------------------------------------
def _vllm_labels(engine: Engine) -> str:
    return f'model_name="{_esc(engine.model)}",engine="0"'


def _vllm_slow(engine: Engine) -> str:
    st = engine.stats
    lb = _vllm_labels(engine)
    out: list[str] = []
    _counter(
        out,
        "vllm:num_preemptions_total",
        "Cumulative number of preemption from the engine.",
        [(lb, st.preemptions_total)],
    )
    _counter(
        out, "vllm:prompt_tokens_total", "Number of prefill tokens processed.", [(lb, st.prompt_tokens_total)]
    )
    _counter(
        out,
        "vllm:generation_tokens_total",
        "Number of generation tokens processed.",
        [(lb, st.generation_tokens_total)],
    )
    _counter(
        out,
        "vllm:request_success_total",
        "Count of successfully processed requests.",
        [(f'{lb},finished_reason="{r}"', n) for r, n in st.success_by_reason.items()],
    )
    _counter(
        out,
        "vllm:prefix_cache_queries_total",
        "Prefix cache queries, in terms of number of queried tokens.",
        [(lb, st.prefix_queries_total)],
    )
    _counter(
        out,
        "vllm:prefix_cache_hits_total",
        "Prefix cache hits, in terms of number of cached tokens.",
        [(lb, st.prefix_hits_total)],
    )
    hists: list[tuple[str, str, Histogram]] = [
        ("vllm:request_prompt_tokens", "Number of prefill tokens processed.", st.prompt_len),
        ("vllm:request_generation_tokens", "Number of generation tokens processed.", st.generation_len),
        (
            "vllm:iteration_tokens_total",
            "Histogram of number of tokens per engine_step.",
            st.iteration_tokens,
        ),
        (
            "vllm:request_params_max_tokens",
            "Histogram of the max_tokens request parameter.",
            st.max_tokens_param,
        ),
        ("vllm:time_to_first_token_seconds", "Histogram of time to first token in seconds.", st.ttft),
        (
            "vllm:time_per_output_token_seconds",
            "Histogram of time per output token in seconds. DEPRECATED: Use vllm:inter_token_latency_seconds instead.",
            st.itl,
        ),
        ("vllm:inter_token_latency_seconds", "Histogram of inter-token latency in seconds.", st.itl),
        ("vllm:e2e_request_latency_seconds", "Histogram of e2e request latency in seconds.", st.e2e),
        (
            "vllm:request_queue_time_seconds",
            "Histogram of time spent in WAITING phase for request.",
            st.queue_time,
        ),
        (
            "vllm:request_inference_time_seconds",
            "Histogram of time spent in RUNNING phase for request.",
            st.inference_time,
        ),
        (
            "vllm:request_prefill_time_seconds",
            "Histogram of time spent in PREFILL phase for request.",
            st.prefill_time,
        ),
        (
            "vllm:request_decode_time_seconds",
            "Histogram of time spent in DECODE phase for request.",
            st.decode_time,
        ),
    ]
    for name, help_text, h in hists:
        h.render(name, help_text, lb, out)
    p = engine.profile
    cfg = (
        f'block_size="{p.block_size}",cache_dtype="auto",calculate_kv_scales="False",'
        f'enable_prefix_caching="{engine.enable_prefix_caching}",gpu_memory_utilization="0.9",'
        f'num_cpu_blocks="None",num_gpu_blocks="{engine.kv.num_blocks}",num_gpu_blocks_override="None",'
        f'sliding_window="None",swap_space_bytes="4294967296"'
    )
    _gauge(out, "vllm:cache_config_info", "Information of the LLMEngine CacheConfig", cfg, 1.0)
    return "\n".join(out) + "\n"


# engine → (its adapter sets, the stamp rendered for them)
_lora_stamps: weakref.WeakKeyDictionary[Engine, tuple[tuple[str, str], float]] = weakref.WeakKeyDictionary()


def _lora_stamp(engine: Engine, running: str, waiting: str) -> float:
    """vLLM sets the LoRA gauge to the time of its last stats update, which happens per engine
    step: it moves while requests run and stays put on an idle pod (whose body then is unchanged)."""
    key = (running, waiting)
    seen = _lora_stamps.get(engine)
    if seen is None or seen[0] != key or engine.running or engine.waiting:
        seen = _lora_stamps[engine] = (key, time.time())
    return seen[1]


def _vllm_fast(engine: Engine) -> str:
    lb = _vllm_labels(engine)
    kv = engine.kv.usage()
    out: list[str] = []
    _gauge(
        out,
        "vllm:num_requests_running",
        "Number of requests in model execution batches.",
        lb,
        len(engine.running),
    )
    _gauge(
        out,
        "vllm:num_requests_waiting",
        "Number of requests waiting to be processed.",
        lb,
        len(engine.waiting),
    )
    _gauge(out, "vllm:kv_cache_usage_perc", "KV-cache usage. 1 means 100 percent usage.", lb, kv)
    _gauge(
        out,
        "vllm:gpu_cache_usage_perc",
        "GPU KV-cache usage. 1 means 100 percent usage. DEPRECATED: Use vllm:kv_cache_usage_perc instead.",
        lb,
        kv,
    )
    running = ",".join(engine.running_adapters())
    waiting = ",".join(engine.waiting_adapters())
    lora = (
        f'max_lora="{engine.lora.max_lora}",running_lora_adapters="{_esc(running)}",'
        f'waiting_lora_adapters="{_esc(waiting)}"'
    )
    stamp = _lora_stamp(engine, running, waiting)
    _gauge(out, "vllm:lora_requests_info", "Running stats on lora requests.", lora, stamp)
    return "\n".join(out) + "\n"


# -- SGLang -------------------------------------------------------------------------------------
def _sglang_slow(engine: Engine) -> str:
    st = engine.stats
    lb = f'model_name="{_esc(engine.model)}"'
    out: list[str] = []
    _counter(
        out,
        "sglang:prompt_tokens_total",
        "Number of prefill tokens processed.",
        [(lb, st.prompt_tokens_total)],
    )
    _counter(
        out,
        "sglang:generation_tokens_total",
        "Number of generation tokens processed.",
        [(lb, st.generation_tokens_total)],
    )
    _counter(out, "sglang:num_requests_total", "Number of requests processed.", [(lb, st.success_total)])
    st.ttft.render(
        "sglang:time_to_first_token_seconds", "Histogram of time to first token in seconds.", lb, out
    )
    st.itl.render(
        "sglang:inter_token_latency_seconds", "Histogram of inter-token latency in seconds.", lb, out
    )
    st.e2e.render(
        "sglang:e2e_request_latency_seconds", "Histogram of End-to-end request latency in seconds", lb, out
    )
    st.queue_time.render("sglang:queue_time_seconds", "Histogram of queueing time in seconds.", lb, out)
    p = engine.profile
    _gauge(
        out,
        "sglang:cache_config_info",
        "Information of the cache configuration.",
        f'{lb},page_size="{p.block_size}",num_pages="{engine.kv.num_blocks}"',
        1.0,
    )
    return "\n".join(out) + "\n"


def _sglang_fast(engine: Engine) -> str:
    lb = f'model_name="{_esc(engine.model)}"'
    st = engine.stats
    out: list[str] = []
    _gauge(out, "sglang:num_running_reqs", "The number of running requests.", lb, len(engine.running))
    _gauge(
        out, "sglang:num_queue_reqs", "The number of requests in the waiting queue.", lb, len(engine.waiting)
    )
    _gauge(
        out,
        "sglang:num_used_tokens",
        "The number of used tokens.",
        lb,
        engine.kv.num_used * engine.profile.block_size,
    )
    _gauge(out, "sglang:token_usage", "The token usage.", lb, engine.kv.usage())
    hit = st.prefix_hits_total / st.prefix_queries_total if st.prefix_queries_total else 0.0
    _gauge(out, "sglang:cache_hit_rate", "The prefix cache hit rate.", lb, hit)
    tput = engine.last_batch_tokens / engine.last_step_s if engine.last_step_s and engine.running else 0.0
    _gauge(out, "sglang:gen_throughput", "The generation throughput (token/s).", lb, tput)
    return "\n".join(out) + "\n"


# -- TGI ----------------------------------------------------------------------------------------
def _tgi_hist(out: list[str], name: str, h: Histogram) -> None:
    h.render(name, name, "", out)


def _tgi_slow(engine: Engine) -> str:
    st = engine.stats
    out: list[str] = []
    out.append("# TYPE tgi_request_success counter")
    out.append(f"tgi_request_success {st.success_total - st.success_by_reason.get('abort', 0)}")
    out.append("# TYPE tgi_request_count counter")
    out.append(f"tgi_request_count {st.success_total}")
    _tgi_hist(out, "tgi_request_duration", st.e2e)
    _tgi_hist(out, "tgi_request_queue_duration", st.queue_time)
    _tgi_hist(out, "tgi_request_inference_duration", st.inference_time)
    _tgi_hist(out, "tgi_request_mean_time_per_token_duration", st.itl)
    _tgi_hist(out, "tgi_request_input_length", st.prompt_len)
    _tgi_hist(out, "tgi_request_generated_tokens", st.generation_len)
    _tgi_hist(out, "tgi_batch_next_size", st.iteration_tokens)
    return "\n".join(out) + "\n"


def _tgi_fast(engine: Engine) -> str:
    batch_max = sum(r.prompt_tokens + r.max_output for r in engine.running)
    out = [
        "# TYPE tgi_queue_size gauge",
        f"tgi_queue_size {len(engine.waiting)}",
        "# TYPE tgi_batch_current_size gauge",
        f"tgi_batch_current_size {len(engine.running)}",
        "# TYPE tgi_batch_current_max_tokens gauge",
        f"tgi_batch_current_max_tokens {batch_max}",
    ]
    return "\n".join(out) + "\n"


FORMATS: dict[str, tuple[FastPart, SlowPart]] = {
    "vllm": (_vllm_fast, _vllm_slow),
    "sglang": (_sglang_fast, _sglang_slow),
    "tgi": (_tgi_fast, _tgi_slow),
}


class MetricsExporter:
    """Renders one pod's /metrics body in one engine format."""

    def __init__(self, engine: Engine, metrics_format: str) -> None:
        if metrics_format not in FORMATS:
            raise ValueError(f"unknown metrics format {metrics_format!r}; known: {', '.join(FORMATS)}")
        self.engine = engine
        self.format = metrics_format
        self._fast, self._slow = FORMATS[metrics_format]
        self._cache = _Cached()
        self.last: str | None = None  # the body of the last scrape (what `stale` keeps serving)

    def render(self, names: frozenset[str] | None = None) -> str:
        """The body; `names` (from `?name[]=`) keeps only those samples, except in TGI's format."""
        if self.format == "tgi":
            names = None
        fast = self._fast(self.engine)
        if names is not None:
            fast = filter_samples(fast, names)
        self.last = fast + self._cache.get(self.engine, self._slow, names)
        return self.last
