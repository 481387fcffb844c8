"""Fast scrapes ask a vLLM pod only for what routing reads every scrape; the cache geometry and the
prefix counters come with the slow scrape, and fast samples keep them (the pod's render is cheaper)."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge

from cluster_gateway.metrics.engines import ENGINES, fetch_names
from cluster_gateway.metrics.scraper import Scraper
from cluster_gateway.pool import Endpoint, EndpointPool
from common.config.gateway import Scrape
from tests.cluster_gateway.metrics.recording_fetcher import Recording
from tests.cluster_gateway.metrics.test_filtered_scrapes import prometheus_app


def _registry() -> CollectorRegistry:
    reg = CollectorRegistry()
    lbl = ["model_name", "engine"]
    key = {"model_name": "llama", "engine": "0"}
    Gauge("vllm:num_requests_waiting", "w", lbl, registry=reg).labels(**key).set(1)
    Gauge("vllm:num_requests_running", "r", lbl, registry=reg).labels(**key).set(2)
    Gauge("vllm:kv_cache_usage_perc", "kv", lbl, registry=reg).labels(**key).set(0.5)
    Counter("vllm:prompt_tokens", "p", lbl, registry=reg).labels(**key).inc(100)
    Counter("vllm:prefix_cache_queries", "q", lbl, registry=reg).labels(**key).inc(1000)
    Counter("vllm:prefix_cache_hits", "h", lbl, registry=reg).labels(**key).inc(250)
    cfg = Gauge("vllm:cache_config_info", "c", ["block_size", "num_gpu_blocks", "engine"], registry=reg)
    cfg.labels(block_size="16", num_gpu_blocks="1000", engine="0").set(1)
    return reg


def test_the_fast_set_is_routings_and_the_slow_set_adds_the_rest() -> None:
    vllm = ENGINES["vllm"]
    fast, slow = fetch_names("vllm", perf=False), fetch_names("vllm", perf=False, slow=True)
    assert fast.isdisjoint(vllm.slow_only) and slow >= vllm.slow_only | fast
    assert {"vllm:num_requests_waiting", "vllm:kv_cache_usage_perc", "vllm:lora_requests_info"} <= fast
    assert fetch_names("vllm", perf=True) >= slow  # the agent's slow scrape: the latency sums too


async def test_fast_samples_keep_the_slow_scrapes_geometry_and_prefix_rate() -> None:
    async with prometheus_app(_registry()) as port:
        pool = EndpointPool()
        pool.set_endpoints([Endpoint(name="p0", address="127.0.0.1", port=port)])
        cfg = Scrape(timeout_ms=2000, engine="vllm", slow_interval_ms=600_000, idle_after_scrapes=0)
        scraper = Scraper(pool, cfg, measure_speed=False)
        recording = scraper._fetcher = Recording(scraper._fetcher)
        try:
            quiet = [await scraper._scrape_pod("p0") for _ in range(3)]
        finally:
            await scraper.aclose()
        paths = [p for p, _ in recording.seen]
        assert "cache_config_info" in paths[0] and "prefix_cache_hits" in paths[0]
        assert all("cache_config_info" not in p and "prefix_cache" not in p for p in paths[1:])
        assert recording.seen[1][1] < recording.seen[0][1]
        assert quiet[1:] == [True, True]  # the kept prefix counters: an unchanged pod stays quiet
        state = pool.get("p0")
        assert state is not None and state.metrics is not None and not state.stale
        m = state.metrics
        assert (m.block_size, m.num_gpu_blocks, m.prefix_cache_hit_rate) == (16, 1000, 0.25)
        assert (m.waiting, m.running, m.kv_usage) == (1, 2, 0.5)
