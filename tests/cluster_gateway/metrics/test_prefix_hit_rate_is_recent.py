"""The prefix-cache hit rate reflects the last seconds, not the pod's whole life."""

from __future__ import annotations

import pytest

from cluster_gateway.metrics.engines import PrefixCounters, read_pod_sample
from cluster_gateway.metrics.prefix_window import PrefixHitWindow
from cluster_gateway.metrics.scraper import Scraper
from cluster_gateway.pool import EndpointPool
from common.config.gateway import Scrape
from tests.cluster_gateway.metrics.bodies import ModelLoad, VllmState, sglang_body, vllm_body
from tests.cluster_gateway.metrics.fake_pods import FakePod, running


def test_window_rate_follows_recent_counters_and_survives_restarts() -> None:
    w = PrefixHitWindow(window_s=10.0)
    # A long cold history: 10% lifetime hit rate.
    assert w.update("p", 0.0, PrefixCounters(hits=1_000, queries=10_000), lifetime=0.1) == 0.1
    # Then the cache warms up: 90% of the next queries hit.
    assert w.update("p", 1.0, PrefixCounters(hits=1_900, queries=11_000), lifetime=0.17) == pytest.approx(0.9)
    # Old readings leave the window: at t=15 only the t>=5 part counts (all hits there).
    w.update("p", 5.0, PrefixCounters(hits=2_900, queries=12_000), lifetime=None)
    rate = w.update("p", 15.0, PrefixCounters(hits=3_900, queries=13_000), lifetime=None)
    assert rate == pytest.approx(1.0)
    # No query since the window's start: the recent rate is unknown, the lifetime one stands in.
    assert w.update("p", 30.0, PrefixCounters(hits=3_900, queries=13_000), lifetime=0.3) == 0.3
    # A restart resets the counters: start over rather than report nonsense.
    assert w.update("p", 31.0, PrefixCounters(hits=5, queries=10), lifetime=0.5) == 0.5
    assert w.update("p", 32.0, PrefixCounters(hits=15, queries=20), lifetime=None) == pytest.approx(1.0)
    w.forget("p")
    assert w.update("p", 33.0, PrefixCounters(hits=15, queries=20), lifetime=0.75) == 0.75


def test_only_vllm_exposes_prefix_counters() -> None:
    sample = read_pod_sample(vllm_body(VllmState(prefix_hits=30, prefix_queries=60)), None, 0.0)
    assert sample.prefix == PrefixCounters(hits=30, queries=60)
    assert read_pod_sample(sglang_body({"m": ModelLoad(0, 0, 0.0)}), None, 0.0).prefix is None


async def test_scraper_reports_the_recent_prefix_hit_rate() -> None:
    pod = FakePod("p", vllm_body(VllmState(prefix_hits=100, prefix_queries=1000)))
    async with running(pod):
        pool = EndpointPool()
        pool.set_endpoints([pod.endpoint()])
        scraper = Scraper(pool, Scrape())
        await scraper.scrape_once()
        state = pool.get("p")
        assert state is not None and state.metrics is not None
        assert state.metrics.prefix_cache_hit_rate == pytest.approx(0.1)  # lifetime, first reading
        pod.body = vllm_body(VllmState(prefix_hits=180, prefix_queries=1100))
        await scraper.scrape_once()
        assert state.metrics.prefix_cache_hit_rate == pytest.approx(0.8)  # the last 100 queries
        await scraper.aclose()
