"""Filtered scrapes (`?name[]=`): a real prometheus_client app and the simulator honour them, TGI-style
pods that ignore them are read from their whole body, and an idle pod is scraped less often."""

from __future__ import annotations

import asyncio
import socket
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager

import uvicorn
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest, make_asgi_app

from cluster_gateway.metrics.engines import fetch_names
from cluster_gateway.metrics.filtered import SLASH_PATH, ignores_filter, metrics_path, sample_lines
from cluster_gateway.metrics.scraper import Scraper
from cluster_gateway.pool import Endpoint, EndpointPool
from common.config.gateway import Scrape
from common.http import Receive, Scope, Send
from modelsim.fleet import PodSpec, SimFleet
from modelsim.metrics_text import filter_samples
from tests.cluster_gateway.metrics.bodies import tgi_body
from tests.cluster_gateway.metrics.fake_pods import FakePod, running
from tests.cluster_gateway.metrics.recording_fetcher import Recording
from tests.eventually import eventually

ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]


def _vllm_registry() -> CollectorRegistry:
    reg = CollectorRegistry()
    lbl = ["model_name", "engine"]
    key = {"model_name": "llama", "engine": "0"}
    Gauge("vllm:num_requests_waiting", "w", lbl, registry=reg).labels(**key).set(4)
    Gauge("vllm:num_requests_running", "r", lbl, registry=reg).labels(**key).set(6)
    Gauge("vllm:kv_cache_usage_perc", "kv", lbl, registry=reg).labels(**key).set(0.25)
    Counter("vllm:prompt_tokens", "p", lbl, registry=reg).labels(**key).inc(1000)
    ttft = Histogram("vllm:time_to_first_token_seconds", "t", lbl, registry=reg).labels(**key)
    e2e = Histogram("vllm:e2e_request_latency_seconds", "e", lbl, registry=reg).labels(**key)
    for v in (0.05, 0.1, 0.2):
        ttft.observe(v)
        e2e.observe(v * 10)
    return reg


@asynccontextmanager
async def prometheus_app(
    registry: CollectorRegistry, wrap: Callable[[CollectorRegistry], ASGIApp] = make_asgi_app
) -> AsyncIterator[int]:
    """prometheus_client's own ASGI app (what vLLM mounts at /metrics) on a port-0 socket."""
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    server = uvicorn.Server(uvicorn.Config(wrap(registry), lifespan="off", log_level="warning"))
    task = asyncio.create_task(server.serve(sockets=[sock]))
    try:
        await eventually(lambda: server.started, what="prometheus app started")
        yield sock.getsockname()[1]
    finally:
        server.should_exit = True
        await task


async def test_a_prometheus_client_app_answers_only_the_asked_samples() -> None:
    async with prometheus_app(_vllm_registry()) as port:
        pool = EndpointPool()
        pool.set_endpoints([Endpoint(name="p0", address="127.0.0.1", port=port)])
        scraper = Scraper(pool, Scrape(timeout_ms=2000), measure_speed=True)
        recording = scraper._fetcher = Recording(scraper._fetcher)
        try:
            await scraper.scrape_once()  # engine unknown: every engine's names, with histograms
            await scraper.scrape_once()  # vLLM now: its names only, no histograms (slow interval)
        finally:
            await scraper.aclose()
        state = pool.get("p0")
        assert state is not None and state.metrics is not None and not state.stale
        assert (state.metrics.engine, state.metrics.waiting, state.metrics.running) == ("vllm", 4, 6)
        assert state.metrics.kv_usage == 0.25
        assert not scraper.ignores_filter("p0")
        (first, first_size), (second, second_size) = recording.seen
        assert first == metrics_path(fetch_names(None, perf=True))
        assert second == metrics_path(fetch_names("vllm", perf=False), SLASH_PATH)
        assert "name%5B%5D=vllm%3Anum_requests_waiting" in second and "time_to_first" not in second
        full = len((await _get_full(port)).splitlines())
        assert second_size < first_size and full > 40  # the unfiltered body has the buckets


def _vllm_api_server(registry: CollectorRegistry) -> ASGIApp:
    """vLLM's routing of /metrics (filtered.py): the exact path renders the whole registry, ignoring
    `name[]` (prometheus-fastapi-instrumentator's route); any other /metrics path reaches the
    prometheus_client app (the Mount with the `^/metrics(?P<path>.*)$` regex)."""
    mounted = make_asgi_app(registry)

    async def app(scope: Scope, receive: Receive, send: Send) -> None:
        if scope["path"] == "/metrics":
            body = generate_latest(registry)
            await send({"type": "http.response.start", "status": 200, "headers": []})
            await send({"type": "http.response.body", "body": body})
        else:
            await mounted(scope, receive, send)

    return app


async def test_vllm_is_asked_past_its_route_that_ignores_the_filter() -> None:
    async with prometheus_app(_vllm_registry(), wrap=_vllm_api_server) as port:
        pool = EndpointPool()
        pool.set_endpoints([Endpoint(name="p0", address="127.0.0.1", port=port, engine="vllm")])
        scraper = Scraper(pool, Scrape(timeout_ms=2000), measure_speed=False)
        recording = scraper._fetcher = Recording(scraper._fetcher)
        try:
            await scraper.scrape_once()
        finally:
            await scraper.aclose()
        assert not scraper.ignores_filter("p0")
        ((path, size),) = recording.seen
        assert path.startswith("/metrics/?name%5B%5D=") and size < 2000
        state = pool.get("p0")
        assert state is not None and state.metrics is not None and state.metrics.waiting == 4


async def test_a_vllm_pod_without_the_slash_path_is_asked_at_metrics_from_then_on() -> None:
    pod = FakePod("old-0", b"vllm:num_requests_waiting 2\nvllm:num_requests_running 1\n")  # /metrics only
    async with running(pod):
        pool = EndpointPool()
        pool.set_endpoints([pod.endpoint(engine="vllm")])
        scraper = Scraper(pool, Scrape(timeout_ms=2000), measure_speed=False)
        recording = scraper._fetcher = Recording(scraper._fetcher)
        try:
            await scraper.scrape_once()  # /metrics/ is 404: asked again at /metrics at once
            await scraper.scrape_once()
        finally:
            await scraper.aclose()
        assert [p.split("?", 1)[0] for p, _ in recording.seen] == ["/metrics", "/metrics"]
        assert pod.metrics_hits == 2
        state = pool.get("old-0")
        assert state is not None and state.metrics is not None and not state.stale
        assert scraper.metrics.failures.labels("http_status")._value.get() == 0


async def _get_full(port: int) -> bytes:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(b"GET /metrics HTTP/1.0\r\nHost: x\r\n\r\n")
    data = await reader.read()
    writer.close()
    return data.split(b"\r\n\r\n", 1)[1]


async def test_the_simulator_filters_as_prometheus_client_does() -> None:
    async with SimFleet([PodSpec(profile="tiny", model="m")]) as fleet:
        exporter = fleet.pods[0].exporter
        full = exporter.render()
        names = fetch_names("vllm", perf=True)
        filtered = exporter.render(names)
        kept = [ln for ln in full.splitlines() if ln and not ln.startswith("#") and _name(ln) in names]
        # same sample lines (values aside: the LoRA gauge's value is the render time)
        got = [ln.rsplit(" ", 1)[0] for ln in filtered.splitlines() if not ln.startswith("#")]
        assert got == [ln.rsplit(" ", 1)[0] for ln in kept]
        assert {_name(ln) for ln in kept} >= {
            "vllm:num_requests_waiting",
            "vllm:e2e_request_latency_seconds_sum",
        }
        assert "_bucket" not in filtered and len(filtered) < len(full) / 4
        assert "# TYPE vllm:num_requests_waiting gauge" in filtered  # each kept family's comments
        assert filter_samples(full, frozenset({"nothing"})) == ""
        # and over HTTP, through the scraper
        pool = EndpointPool()
        pool.set_endpoints([Endpoint(name="sim-0", address="127.0.0.1", port=fleet.pods[0].port)])
        scraper = Scraper(pool, Scrape(timeout_ms=2000, engine="vllm"), measure_speed=False)
        recording = scraper._fetcher = Recording(scraper._fetcher)
        try:
            await scraper.scrape_once()
        finally:
            await scraper.aclose()
        assert not scraper.ignores_filter("sim-0") and recording.seen[0][1] < 2500
        state = pool.get("sim-0")
        assert state is not None and state.metrics is not None and state.metrics.engine == "vllm"


def _name(line: str) -> str:
    return line.split("{", 1)[0].split(" ", 1)[0]


async def test_a_pod_ignoring_the_filter_is_read_from_its_whole_body() -> None:
    body = tgi_body(queue=3, batch=5)
    assert ignores_filter(body, len(fetch_names("tgi", perf=False)))
    assert sample_lines(b"# HELP a x\n# TYPE a gauge\na 1\n\nb 2") == 2
    pod = FakePod("tgi-0", body)  # answers every query with its whole body, like TGI
    async with running(pod):
        pool = EndpointPool()
        pool.set_endpoints([pod.endpoint()])
        scraper = Scraper(pool, Scrape(timeout_ms=2000, slow_interval_ms=10), measure_speed=True)
        try:
            await scraper.scrape_once()
            assert scraper.ignores_filter("tgi-0")
            await asyncio.sleep(0.02)
            await scraper.scrape_once()  # histograms due: read from the same whole body
        finally:
            await scraper.aclose()
        state = pool.get("tgi-0")
        assert state is not None and state.metrics is not None
        assert (state.metrics.engine, state.metrics.waiting, state.metrics.running) == ("tgi", 3, 5)


async def test_an_idle_pod_is_scraped_less_often_until_it_is_sent_a_request() -> None:
    async with SimFleet([PodSpec(profile="tiny", model="m")]) as fleet:
        pool = EndpointPool()
        pool.set_endpoints([Endpoint(name="sim-0", address="127.0.0.1", port=fleet.pods[0].port)])
        cfg = Scrape(
            interval_ms=20,
            idle_after_scrapes=3,
            idle_interval_ms=400,
            max_staleness_ms=5000,
            timeout_ms=2000,
            frozen_after_scrapes=2,
        )
        scraper = Scraper(pool, cfg, measure_speed=False)
        recording = scraper._fetcher = Recording(scraper._fetcher)
        task = asyncio.create_task(scraper.run())
        try:
            await eventually(lambda: scraper.cadence.is_quiet("sim-0"), what="pod quiet")
            quiet_at = len(recording.seen)
            await asyncio.sleep(1.0)  # 50 fast intervals: at most ~3 idle scrapes
            idle_scrapes = len(recording.seen) - quiet_at
            assert 1 <= idle_scrapes <= 4, idle_scrapes
            state = pool.get("sim-0")
            assert state is not None and not state.stale  # idle and unchanged is not frozen
            before = len(recording.seen)
            pool.acquire("sim-0")  # the gateway dispatched a request to it
            pool.release("sim-0")
            took = await eventually(lambda: len(recording.seen) > before, what="scraped after dispatch")
            assert took < 0.3  # within about one fast interval, not the idle one (busy-CPU margin)
            assert not scraper.cadence.is_quiet("sim-0")
        finally:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
