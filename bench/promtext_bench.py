"""Targeted Prometheus-text read vs a full parse, on a faithful vLLM `/metrics` body.

`python -m bench.promtext_bench [--engines N] [--models M] [--rounds R] [--pods P --seconds S]`

The body is produced the way vLLM produces it: prometheus_client metrics with vLLM's names, help
texts, label sets and histogram bucket layouts (v1 engine: `model_name` + `engine` labels), the
process/platform/GC collectors, and randomly observed values, rendered by `generate_latest`.

A second table measures a whole scrape (fetch over loopback + parse + map) as the gateway runs it:
CPU per scrape in the gateway's process, with the scraper's lean keep-alive client and with httpx,
against P pods served from a child process at a 100 ms interval.
"""

from __future__ import annotations

import argparse
import asyncio
import multiprocessing
import random
import statistics
import time
from collections.abc import Callable, Iterable, Sequence
from functools import partial
from typing import Any

import httpx
from prometheus_client import (
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    generate_latest,
)
from prometheus_client.gc_collector import GCCollector
from prometheus_client.metrics_core import Metric
from prometheus_client.parser import text_string_to_metric_families
from prometheus_client.platform_collector import PlatformCollector
from prometheus_client.process_collector import ProcessCollector

from bench import report
from cluster_gateway.metrics.scraper import Scraper
from cluster_gateway.pool import Endpoint, EndpointPool
from common.config.gateway import Scrape
from common.promtext import parse_families, reader_for

# The names a gateway reads from a vLLM pod (cf. cluster_gateway.metrics.engines).
GATEWAY_WANTED = frozenset(
    {
        "vllm:num_requests_waiting",
        "vllm:num_requests_running",
        "vllm:kv_cache_usage_perc",
        "vllm:gpu_cache_usage_perc",
        "vllm:lora_requests_info",
        "vllm:cache_config_info",
        "vllm:prefix_cache_hits_total",
        "vllm:prefix_cache_queries_total",
    }
)

_LATENCY_BUCKETS: tuple[float, ...] = (0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0)
_LATENCY_BUCKETS += (40.0, 50.0, 60.0, 120.0, 240.0, 480.0, 960.0, 1920.0, 7680.0)
_TTFT_BUCKETS: tuple[float, ...] = (0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75)
_TTFT_BUCKETS += (1.0, 2.5, 5.0, 7.5, 10.0, 20.0, 40.0, 80.0, 160.0, 640.0, 2560.0)
_ITL_BUCKETS: tuple[float, ...] = (0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0)
_ITL_BUCKETS += (2.5, 5.0, 7.5, 10.0, 20.0, 40.0, 80.0)
_ITERATION_BUCKETS = (1, 8, 16, 24, 32, 40, 48, 56, 64, 128, 256, 512, 1024, 2048, 4096, 8192, 16384)
# vLLM's help text for each histogram it exports (v1 engine)
_HISTOGRAM_HELP = {
    "vllm:iteration_tokens_total": "Histogram of number of tokens per engine_step.",
    "vllm:time_to_first_token_seconds": "Histogram of time to first token in seconds.",
    "vllm:time_per_output_token_seconds": "Histogram of time per output token in seconds.",
    "vllm:inter_token_latency_seconds": "Histogram of inter-token latency in seconds.",
    "vllm:e2e_request_latency_seconds": "Histogram of e2e request latency in seconds.",
    "vllm:request_queue_time_seconds": "Histogram of time spent in WAITING phase for request.",
    "vllm:request_inference_time_seconds": "Histogram of time spent in RUNNING phase for request.",
    "vllm:request_prefill_time_seconds": "Histogram of time spent in PREFILL phase for request.",
    "vllm:request_decode_time_seconds": "Histogram of time spent in DECODE phase for request.",
    "vllm:request_prompt_tokens": "Number of prefill tokens processed.",
    "vllm:request_generation_tokens": "Number of generation tokens processed.",
    "vllm:request_max_num_generation_tokens": "Histogram of maximum number of requested generation tokens.",
    "vllm:request_params_n": "Histogram of the n request parameter.",
    "vllm:request_params_max_tokens": "Histogram of the max_tokens request parameter.",
}


def _one_two_five(limit: int) -> list[float]:
    """vLLM's 1-2-5 token-count buckets up to the model's max length."""
    out: list[float] = []
    exp = 0
    while True:
        for m in (1, 2, 5):
            v = m * 10**exp
            if v > limit:
                return out
            out.append(float(v))
        exp += 1


def vllm_metrics_body(**kwargs: Any) -> bytes:
    """A `/metrics` body as a vLLM v1 server renders it (`vllm_registry`'s arguments)."""
    return generate_latest(vllm_registry(**kwargs))


def vllm_registry(
    *,
    models: Iterable[str] = ("meta-llama/Llama-3.1-8B-Instruct",),
    engines: int = 1,
    max_model_len: int = 8192,
    running_adapters: str = "sql-lora,chat-lora",
    waiting_adapters: str = "",
    seed: int = 0,
    observations: int = 200,
    legacy_cache_gauge: bool = False,
) -> CollectorRegistry:
    """vLLM v1's metric set (names, labels, buckets) with `observations` requests recorded."""
    rng = random.Random(seed)
    reg = CollectorRegistry()
    ProcessCollector(registry=reg)
    PlatformCollector(registry=reg)
    GCCollector(registry=reg)
    lbl = ["model_name", "engine"]
    kv_name = "vllm:gpu_cache_usage_perc" if legacy_cache_gauge else "vllm:kv_cache_usage_perc"
    gauges = {
        "running": Gauge(
            "vllm:num_requests_running", "Number of requests in model execution batches.", lbl, registry=reg
        ),
        "waiting": Gauge(
            "vllm:num_requests_waiting", "Number of requests waiting to be processed.", lbl, registry=reg
        ),
        "kv": Gauge(kv_name, "KV-cache usage. 1 means 100 percent usage.", lbl, registry=reg),
    }
    counters = {
        "preempt": Counter(
            "vllm:num_preemptions", "Cumulative number of preemption from the engine.", lbl, registry=reg
        ),
        "prompt": Counter("vllm:prompt_tokens", "Number of prefill tokens processed.", lbl, registry=reg),
        "gen": Counter("vllm:generation_tokens", "Number of generation tokens processed.", lbl, registry=reg),
        "pq": Counter(
            "vllm:prefix_cache_queries",
            "Prefix cache queries, in terms of number of queried tokens.",
            lbl,
            registry=reg,
        ),
        "ph": Counter(
            "vllm:prefix_cache_hits",
            "Prefix cache hits, in terms of number of cached tokens.",
            lbl,
            registry=reg,
        ),
    }
    success = Counter(
        "vllm:request_success",
        "Count of successfully processed requests.",
        [*lbl, "finished_reason"],
        registry=reg,
    )
    tok = _one_two_five(max_model_len)
    # name -> (buckets, how one request's value is drawn); registered in vLLM's order
    layout: dict[str, tuple[Sequence[float], Callable[[], float]]] = {
        "vllm:iteration_tokens_total": (_ITERATION_BUCKETS, lambda: rng.randint(1, 4096)),
        "vllm:time_to_first_token_seconds": (_TTFT_BUCKETS, lambda: rng.lognormvariate(-2.5, 1.0)),
        "vllm:time_per_output_token_seconds": (_ITL_BUCKETS, lambda: rng.lognormvariate(-4.0, 0.5)),
        "vllm:inter_token_latency_seconds": (_ITL_BUCKETS, lambda: rng.lognormvariate(-4.0, 0.5)),
        "vllm:e2e_request_latency_seconds": (_LATENCY_BUCKETS, lambda: rng.lognormvariate(1.0, 0.8)),
        "vllm:request_queue_time_seconds": (_LATENCY_BUCKETS, lambda: rng.expovariate(5.0)),
        "vllm:request_inference_time_seconds": (_LATENCY_BUCKETS, lambda: rng.lognormvariate(1.0, 0.7)),
        "vllm:request_prefill_time_seconds": (_LATENCY_BUCKETS, lambda: rng.expovariate(10.0)),
        "vllm:request_decode_time_seconds": (_LATENCY_BUCKETS, lambda: rng.lognormvariate(1.0, 0.7)),
        "vllm:request_prompt_tokens": (tok, lambda: rng.randint(16, max_model_len // 2)),
        "vllm:request_generation_tokens": (tok, lambda: rng.randint(1, 1024)),
        "vllm:request_max_num_generation_tokens": (tok, lambda: rng.choice((256, 512, 1024, 2048))),
        "vllm:request_params_n": ((1, 2, 5, 10, 20), lambda: 1),
        "vllm:request_params_max_tokens": (tok, lambda: rng.choice((256, 512, 1024, 2048))),
    }
    hists = [
        (Histogram(name, _HISTOGRAM_HELP[name], lbl, buckets=buckets, registry=reg), draw)
        for name, (buckets, draw) in layout.items()
    ]
    # vLLM registers these two last (LoRA stats and the engine's cache config at start-up).
    lora = Gauge(
        "vllm:lora_requests_info",
        "Running stats on lora requests.",
        ["max_lora", "waiting_lora_adapters", "running_lora_adapters"],
        registry=reg,
    )
    cache_cfg = Gauge(
        "vllm:cache_config_info",
        "Information of the LLMEngine CacheConfig",
        [
            "block_size",
            "cache_dtype",
            "enable_prefix_caching",
            "gpu_memory_utilization",
            "num_cpu_blocks",
            "num_gpu_blocks",
            "num_gpu_blocks_override",
            "prefix_caching_hash_algo",
            "sliding_window",
            "swap_space",
            "engine",
        ],
        registry=reg,
    )
    lora.labels(
        max_lora="4", waiting_lora_adapters=waiting_adapters, running_lora_adapters=running_adapters
    ).set(1_700_000_000.0 + rng.random() * 1e6)
    for engine in range(engines):
        cache_cfg.labels(
            block_size="16",
            cache_dtype="auto",
            enable_prefix_caching="True",
            gpu_memory_utilization="0.9",
            num_cpu_blocks="2048",
            num_gpu_blocks="27910",
            num_gpu_blocks_override="None",
            prefix_caching_hash_algo="sha256",
            sliding_window="None",
            swap_space="4",
            engine=str(engine),
        ).set(1)
        for model in models:
            key = {"model_name": model, "engine": str(engine)}
            gauges["running"].labels(**key).set(rng.randint(0, 64))
            gauges["waiting"].labels(**key).set(rng.randint(0, 16))
            gauges["kv"].labels(**key).set(rng.random())
            for c in counters.values():
                c.labels(**key).inc(rng.randint(0, 1_000_000))
            for reason in ("stop", "length", "abort"):
                success.labels(**key, finished_reason=reason).inc(rng.randint(0, 10_000))
            for hist, draw in hists:
                child = hist.labels(**key)
                for _ in range(observations // 10):
                    child.observe(draw())
    return reg


def _time_per_call(fn: Callable[[], object], rounds: int) -> float:
    """Median µs per call over 5 batches of `rounds` calls."""
    batches = []
    for _ in range(5):
        t0 = time.perf_counter()
        for _ in range(rounds):
            fn()
        batches.append((time.perf_counter() - t0) / rounds * 1e6)
    return statistics.median(batches)


def _full_parse(text: str) -> list[Metric]:
    return list(text_string_to_metric_families(text))


def run(engines: int, models: int, rounds: int) -> list[tuple[str, int, int, float, float]]:
    """Rows: (body, bytes, lines, targeted µs, full µs)."""
    rows = []
    cases = {
        "vllm 1 model": vllm_metrics_body(),
        f"vllm {models} models x {engines} engines": vllm_metrics_body(
            models=[f"model-{i}" for i in range(models)], engines=engines
        ),
    }
    reader = reader_for(GATEWAY_WANTED)
    for label, body in cases.items():
        text = body.decode()
        reader.read(body)  # warm
        targeted = _time_per_call(partial(parse_families, body, GATEWAY_WANTED), rounds)
        full = _time_per_call(partial(_full_parse, text), max(1, rounds // 50))
        rows.append((label, len(body), body.count(b"\n"), targeted, full))
    return rows


# --- whole scrapes over loopback ---------------------------------------------------------------


def _serve_pods(body: bytes, ports: Any, ready: Any) -> None:
    """Child process: P plain HTTP/1.1 keep-alive servers answering every GET with `body`."""

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        head = b"HTTP/1.1 200 OK\r\nContent-Type: text/plain; version=0.0.4\r\n"
        response = head + b"Content-Length: " + str(len(body)).encode() + b"\r\n\r\n" + body
        try:
            while True:
                await reader.readuntil(b"\r\n\r\n")
                writer.write(response)
                await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError):
            writer.close()

    async def main() -> None:
        servers = [await asyncio.start_server(handle, "127.0.0.1", 0) for _ in range(len(ports))]
        for i, server in enumerate(servers):
            ports[i] = server.sockets[0].getsockname()[1]
        ready.set()
        await asyncio.Event().wait()

    asyncio.run(main())


async def _scrape_cost(
    ports: list[int], seconds: float, client: httpx.AsyncClient | None
) -> tuple[float, float]:
    """(scrapes per second, µs of this process's CPU per scrape) over `seconds` of steady state."""
    pool = EndpointPool()
    pool.set_endpoints(Endpoint(name=f"pod-{i}", address="127.0.0.1", port=p) for i, p in enumerate(ports))
    scraper = Scraper(pool, Scrape(interval_ms=100, timeout_ms=2000), client=client)
    task = asyncio.create_task(scraper.run())
    await asyncio.sleep(1.0)  # connections up, engines detected
    count = "fleetgate_scrape_duration_seconds_count"
    n0, cpu0, t0 = scraper.registry.get_sample_value(count) or 0.0, time.process_time(), time.monotonic()
    await asyncio.sleep(seconds)
    n1, cpu1, t1 = scraper.registry.get_sample_value(count) or 0.0, time.process_time(), time.monotonic()
    task.cancel()
    await asyncio.gather(task, return_exceptions=True)
    scrapes = max(n1 - n0, 1.0)
    return scrapes / (t1 - t0), (cpu1 - cpu0) / scrapes * 1e6


def run_scrapes(pods: int, seconds: float) -> list[tuple[str, float, float]]:
    body = vllm_metrics_body()
    ctx = multiprocessing.get_context("spawn")
    ports = ctx.Array("i", pods)
    ready = ctx.Event()
    child = ctx.Process(target=_serve_pods, args=(body, ports, ready), daemon=True)
    child.start()
    try:
        if not ready.wait(30):
            raise RuntimeError("pod server did not start")

        async def both() -> list[tuple[str, float, float]]:
            lean = await _scrape_cost([int(p) for p in ports[:]], seconds, None)
            async with httpx.AsyncClient(
                limits=httpx.Limits(max_connections=64, max_keepalive_connections=64), trust_env=False
            ) as client:
                general = await _scrape_cost([int(p) for p in ports[:]], seconds, client)
            return [("lean keep-alive client (default)", *lean), ("httpx.AsyncClient", *general)]

        return asyncio.run(both())
    finally:
        child.terminate()
        child.join(10)


def parse_table(rows: list[tuple[str, int, int, float, float]]) -> str:
    header = ["body", "KB", "lines", "targeted µs/parse", "prometheus_client full µs/parse", "speed-up"]
    cells = [
        [label, f"{size / 1024:.1f}", str(lines), f"{targeted:.1f}", f"{full:.0f}", f"{full / targeted:.0f}x"]
        for label, size, lines, targeted, full in rows
    ]
    return report.markdown_table(header, cells, right={1, 2, 3, 4, 5})


def scrape_table(rows: list[tuple[str, float, float]]) -> str:
    header = ["client", "scrapes/s", "CPU µs/scrape", "CPU share of one core"]
    cells = [[label, f"{rate:.0f}", f"{cpu:.0f}", f"{rate * cpu / 1e4:.0f}%"] for label, rate, cpu in rows]
    return report.markdown_table(header, cells, right={1, 2, 3})


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        prog="fleetgate bench promtext", description=__doc__.splitlines()[0] if __doc__ else None
    )
    ap.add_argument("--engines", type=int, default=2, help="data-parallel engines in the large body")
    ap.add_argument("--models", type=int, default=2, help="served model names in the large body")
    ap.add_argument("--rounds", type=int, default=2000, help="parses to time (default 2000)")
    ap.add_argument("--pods", type=int, default=20, help="pods scraped in the whole-scrape table (0: skip)")
    ap.add_argument("--seconds", type=float, default=3.0, help="measured seconds per client")
    ap.add_argument("--quick", action="store_true", help="fewer rounds and a 1 s scrape measurement")
    args = ap.parse_args(argv)
    if args.quick:
        args.rounds, args.seconds = min(args.rounds, 300), min(args.seconds, 1.0)
    rows = run(args.engines, args.models, args.rounds)
    print(f"wanted: {len(GATEWAY_WANTED)} metric names ({', '.join(sorted(GATEWAY_WANTED))})\n")
    print(parse_table(rows))
    if args.pods > 0:
        print(f"\nwhole scrapes (fetch + parse + map) of {args.pods} pods every 100 ms, 42 KB vLLM body\n")
        print(scrape_table(run_scrapes(args.pods, args.seconds)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
