"""The scraper against real HTTP pods on 127.0.0.1: freshness, staleness, isolation, membership."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import httpx
from prometheus_client import CollectorRegistry

from cluster_gateway.metrics.scraper import Scraper
from cluster_gateway.pool import Endpoint, EndpointPool
from common.config.gateway import Scrape
from tests.cluster_gateway.metrics.bodies import ModelLoad, VllmState, sglang_body, tgi_body, vllm_body
from tests.cluster_gateway.metrics.fake_pods import FakePod, running
from tests.cluster_gateway.metrics.recording_fetcher import Recording
from tests.eventually import eventually


def _vllm(waiting: int, running_: int = 1, kv: float = 0.5) -> bytes:
    return vllm_body(VllmState(models={"llama": ModelLoad(waiting, running_, kv)}))


@asynccontextmanager
async def scraping(scraper: Scraper) -> AsyncIterator[Scraper]:
    task = asyncio.create_task(scraper.run())
    try:
        yield scraper
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)


def _sample(registry: CollectorRegistry, name: str, labels: dict[str, str] | None = None) -> float:
    value = registry.get_sample_value(name, labels or {})
    return 0.0 if value is None else value


async def test_metrics_and_models_reach_the_pool_and_follow_changes_within_an_interval() -> None:
    pod = FakePod("p0", _vllm(waiting=2), models=["llama", "sql-lora"])
    async with running(pod):
        pool = EndpointPool()
        pool.set_endpoints([pod.endpoint()])
        scraper = Scraper(pool, Scrape(interval_ms=50, timeout_ms=1000, models_refresh_s=30))
        async with scraping(scraper):
            state = pool.get("p0")
            assert state is not None
            await eventually(lambda: state.metrics is not None and state.models != frozenset())
            assert state.metrics is not None and state.metrics.waiting == 2 and not state.stale
            assert state.models == {"llama", "sql-lora"} and state.metrics.engine == "vllm"
            pod.body = _vllm(waiting=9, kv=0.9)
            took = await eventually(lambda: state.metrics is not None and state.metrics.waiting == 9)
            assert took < 1.0  # one 50 ms interval, with a wide margin for a busy CPU
            assert state.metrics.kv_usage == 0.9
            assert abs(time.monotonic() - state.metrics.scraped_at) < 1.0
        assert _sample(scraper.registry, "fleetgate_scrape_duration_seconds_count") >= 2


async def test_a_dead_pod_goes_stale_after_n_misses_and_recovers() -> None:
    pod = FakePod("p0", _vllm(waiting=1))
    async with running(pod):
        pool = EndpointPool()
        pool.set_endpoints([pod.endpoint()])
        scraper = Scraper(pool, Scrape(stale_after_misses=3, timeout_ms=500, max_staleness_ms=60_000))
        state = pool.get("p0")
        assert state is not None
        await scraper.scrape_once()
        assert not state.stale and state.metrics is not None
        await pod.stop()  # connection refused from now on
        for miss in (1, 2):
            await scraper.scrape_once()
            assert state.consecutive_failures == miss and not state.stale
        await scraper.scrape_once()
        assert state.stale and state.consecutive_failures == 3
        assert _sample(scraper.registry, "fleetgate_scrape_failures_total", {"reason": "connect"}) == 3
        assert _sample(scraper.registry, "fleetgate_scrape_stale_pods") == 1
        await pod.start()  # same port
        await scraper.scrape_once()
        assert not state.stale and state.consecutive_failures == 0
        assert _sample(scraper.registry, "fleetgate_scrape_stale_pods") == 0
        await scraper.aclose()


async def test_a_hung_pod_neither_delays_the_others_nor_looks_fresh() -> None:
    fast, hung = FakePod("fast", _vllm(waiting=1)), FakePod("hung", _vllm(waiting=0))
    async with running(fast, hung):
        pool = EndpointPool()
        pool.set_endpoints([fast.endpoint(), hung.endpoint()])
        cfg = Scrape(interval_ms=50, timeout_ms=5000, max_staleness_ms=300, stale_after_misses=3)
        scraper = Scraper(pool, cfg)
        await scraper.scrape_once()
        hung.hang = True
        fast_state, hung_state = pool.get("fast"), pool.get("hung")
        assert fast_state is not None and hung_state is not None and not hung_state.stale
        async with scraping(scraper):
            start_hits = fast.metrics_hits
            await asyncio.sleep(1.0)
            # Stuck behind a 5 s timeout, the hung pod is marked stale by age (300 ms) long before,
            # while the fast pod kept its 50 ms cadence (20 ideal; generous floor for a busy CPU).
            assert hung_state.stale and hung_state.consecutive_failures == 0
            assert fast.metrics_hits - start_hits >= 8
            assert not fast_state.stale and fast_state.metrics_age() < 0.5
            fast.body = _vllm(waiting=5)
            await eventually(lambda: fast_state.metrics is not None and fast_state.metrics.waiting == 5, 1.0)


async def test_pods_added_and_removed_by_discovery_are_picked_up_on_the_fly() -> None:
    a = FakePod("a", _vllm(waiting=1), models=["llama"])
    b = FakePod("b", sglang_body({"qwen": ModelLoad(3, 4, 0.25)}), models=["qwen"])
    async with running(a, b):
        pool = EndpointPool()
        pool.set_endpoints([a.endpoint()])
        scraper = Scraper(pool, Scrape(interval_ms=50, models_refresh_s=60))
        async with scraping(scraper):
            await eventually(lambda: (s := pool.get("a")) is not None and s.metrics is not None)
            pool.upsert(b.endpoint())  # engine unknown: detected from the body
            took = await eventually(
                lambda: (s := pool.get("b")) is not None and s.metrics is not None and bool(s.models)
            )
            assert took < 1.5
            b_state = pool.get("b")
            assert b_state is not None and b_state.metrics is not None
            assert b_state.metrics.engine == "sglang" and b_state.metrics.waiting == 3
            assert b_state.models == {"qwen"}
            pool.remove("a")
            await asyncio.sleep(0.3)  # the supervisor notices within an interval
            hits = a.metrics_hits
            await asyncio.sleep(0.4)
            assert a.metrics_hits == hits  # no more scrapes of a removed pod


async def test_models_are_refreshed_periodically_and_tgi_info_is_a_fallback() -> None:
    vllm_pod = FakePod("v", _vllm(waiting=0), models=["llama"])
    tgi_pod = FakePod("t", tgi_body(queue=2, batch=5), models=["bigscience/bloom"], models_via_info=True)
    async with running(vllm_pod, tgi_pod):
        pool = EndpointPool()
        pool.set_endpoints([vllm_pod.endpoint(), tgi_pod.endpoint(engine="tgi")])
        scraper = Scraper(pool, Scrape(interval_ms=100, models_refresh_s=0.2))
        async with scraping(scraper):
            v, t = pool.get("v"), pool.get("t")
            assert v is not None and t is not None
            await eventually(lambda: v.models == {"llama"} and t.models == {"bigscience/bloom"})
            vllm_pod.models = ["llama", "new-adapter"]
            took = await eventually(lambda: v.models == {"llama", "new-adapter"})
            assert took < 1.5
            assert t.metrics is not None and (t.metrics.waiting, t.metrics.running) == (2, 5)
            assert t.metrics.kv_usage is None


async def test_bad_bodies_and_error_statuses_count_as_failures() -> None:
    garbage = FakePod("garbage", b"<html>definitely not metrics</html>")
    broken = FakePod("broken", _vllm(waiting=1), status=503)
    async with running(garbage, broken):
        pool = EndpointPool()
        pool.set_endpoints([garbage.endpoint(), broken.endpoint()])
        registry = CollectorRegistry()
        scraper = Scraper(pool, Scrape(stale_after_misses=1), registry=registry)
        assert scraper.registry is registry
        await scraper.scrape_once()
        assert all(p.stale and p.metrics is None for p in pool.pods())
        assert _sample(registry, "fleetgate_scrape_failures_total", {"reason": "bad_body"}) == 1
        assert _sample(registry, "fleetgate_scrape_failures_total", {"reason": "http_status"}) == 1
        # Explicitly configured engine: a wrong-engine body is a bad body too.
        pool.set_endpoints([broken.endpoint(engine="tgi")])
        broken.status = 200
        await scraper.scrape_once()
        assert _sample(registry, "fleetgate_scrape_failures_total", {"reason": "bad_body"}) == 2
        await scraper.aclose()


async def test_scrapes_are_bounded_by_max_concurrency() -> None:
    pods = [FakePod(f"p{i}", _vllm(waiting=i)) for i in range(4)]
    async with running(*pods):
        for p in pods:
            p.hang = True
        pool = EndpointPool()
        pool.set_endpoints([p.endpoint() for p in pods])
        scraper = Scraper(pool, Scrape(max_concurrency=2, timeout_ms=300, stale_after_misses=1))
        fetches = scraper._fetcher = Recording(scraper._fetcher)
        started = time.monotonic()
        await scraper.scrape_once()
        elapsed = time.monotonic() - started
        # 4 hung pods, never more than 2 at a time, each given up after 300 ms: at least two waves
        assert fetches.peak == 2
        assert elapsed >= 0.55
        assert sum(p.metrics_hits for p in pods) == 4
        assert _sample(scraper.registry, "fleetgate_scrape_failures_total", {"reason": "timeout"}) == 4
        await scraper.aclose()


async def test_two_scrapers_in_one_process_do_not_clash() -> None:
    pool = EndpointPool()
    first, second = Scraper(pool, Scrape()), Scraper(pool, Scrape())
    assert first.registry is not second.registry


async def test_a_given_httpx_client_is_used_and_left_open() -> None:
    ok, hung = FakePod("ok", _vllm(waiting=4), models=["llama"]), FakePod("hung", _vllm(waiting=0))
    hung.hang = True
    async with running(ok, hung), httpx.AsyncClient() as client:
        pool = EndpointPool()
        pool.set_endpoints([ok.endpoint(), hung.endpoint()])
        # the hung pod times out; 1 s leaves the answering one room on a loaded machine
        scraper = Scraper(pool, Scrape(timeout_ms=1000, stale_after_misses=1), client=client)
        await scraper.scrape_once()
        await scraper.refresh_models_once()
        ok_state, hung_state = pool.get("ok"), pool.get("hung")
        assert ok_state is not None and ok_state.metrics is not None and ok_state.metrics.waiting == 4
        assert ok_state.models == {"llama"}
        assert hung_state is not None and hung_state.stale
        assert _sample(scraper.registry, "fleetgate_scrape_failures_total", {"reason": "timeout"}) == 1
        await scraper.aclose()
        assert not client.is_closed


async def test_a_pod_that_moves_to_a_new_address_is_followed() -> None:
    old, new = FakePod("old", _vllm(waiting=1)), FakePod("new", tgi_body(queue=6, batch=2))
    async with running(old, new):
        pool = EndpointPool()
        pool.set_endpoints([Endpoint(name="pod", address="127.0.0.1", port=old.port)])
        scraper = Scraper(pool, Scrape(interval_ms=50))
        async with scraping(scraper):
            state = pool.get("pod")
            assert state is not None
            await eventually(lambda: state.metrics is not None and state.metrics.engine == "vllm")
            # Same pod name, new address and a different engine (re-detected from the body).
            pool.set_endpoints([Endpoint(name="pod", address="127.0.0.1", port=new.port)])
            await eventually(lambda: state.metrics is not None and state.metrics.engine == "tgi")
            assert state.metrics is not None and state.metrics.waiting == 6
