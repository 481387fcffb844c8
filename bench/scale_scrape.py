"""Scrape cost at fleet scale: gateway CPU per scrape, scrapes/s per core, pod-side render CPU, freshness.

`python -m bench.scale_scrape [--quick] [--pods 1000] [--seconds S]`; `rows(quick)` is what
`fleetgate bench scale` imports. All figures are CPU time (process_time of the bench process, which
runs only the scraper, or /proc of a child), so they carry over from a loaded machine; freshness is
wall-clock and so depends on the machine's load, which the table notes.

1. parse: µs of CPU to read one vLLM-size body (prometheus_client-rendered, 43 KB) as before (the whole
   body; with the latency histograms once a second) and as now (the `name[]`-filtered body).
2. whole scrapes over loopback (fetch + parse + map + pool), unfiltered vs filtered: µs per scrape
   and the scrapes/s one core sustains, against simulated pods (`modelsim.metrics_ports`).
3. the pod's side: CPU of vLLM's metric set under uvicorn on uvloop, as vLLM serves it, both as
   prometheus_client's ASGI app alone and behind vLLM's API server wiring (FastAPI, CORS and
   prometheus-fastapi-instrumentator, whose `/metrics` route ignores `name[]`: filtered.py), and
   of a simulator pod, under one gateway's scrapes: unfiltered, filtered at `/metrics` (the product
   before), filtered at `/metrics/` (now) at 10 scrapes/s as for a pod under traffic, and for an
   idle pod at the idle interval. Net of the pod's idle CPU, read from the kernel's per-process CPU
   clock (ns resolution; /proc ticks are 10 ms, 0.3% of a core over 3 s). The same wiring in process
   (no socket): µs of CPU per `/metrics/` request for the fast and the slow (latency sums) scrape.
3b. a pod under traffic (the case the fast interval is for: the cadence slows idle pods down): the
   vLLM wiring with a vLLM-shaped streaming `/v1/completions` route (`bench.vllm_completions`), K
   streams kept open by a load client in another process; rounds of windows without scrapes (A) and
   with one gateway's scraper at 100 ms (B: the fast scrape's families before and now, with an
   agent's 1/s latency sums, 4 gateways for a per-scrape figure with 4x the signal), in rotating order. Each row: the median over rounds of B - A of the API server's
   CPU share, with min, max and a 95% interval of the mean; at 8 and 32 streams.
4. 1,000 pods from one simulator process pair, one scraper at the default 100 ms interval (every
   pod at the fast interval: the adaptive idle interval off, the strict case), CPU budget 1 core,
   with CPython's GC defaults (before) and the gateway's GC policy (now, common/gc_policy.py):
   every 50 ms the share of pods whose sample is at most 2 x the interval old, reported as its 1st
   percentile over the samples, the longest full GC pause, and the cores used; then the same fleet
   with the defaults (idle pods slowed down) for its CPU.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import multiprocessing
import socket
import statistics
import time
from collections.abc import Coroutine
from dataclasses import dataclass
from typing import Any, TypeVar

from bench import report
from bench.procstat import process_cpu_clock
from bench.promtext_bench import vllm_metrics_body, vllm_registry
from bench.vllm_completions import add_completion_routes, drive
from cluster_gateway.metrics.engines import fetch_names, read_pod_sample
from cluster_gateway.metrics.filtered import FILTERED_BASE
from cluster_gateway.metrics.scraper import Scraper
from cluster_gateway.pool import Endpoint, EndpointPool
from common import runloop
from common.config.gateway import Scrape
from common.gc_policy import GcPolicy

T = TypeVar("T")

__all__ = ["Row", "main", "rows", "table"]

INTERVAL_MS = 100


def run_loop(main: Coroutine[Any, Any, T]) -> T:
    """The servers' loop without their GC policy: each measurement here sets its own (before/now)."""
    return runloop.run(main, gc_policy=False)


@dataclass(frozen=True)
class Row:
    measure: str
    pods: int | None
    value: float
    unit: str
    note: str = ""


# --- 1. parse -----------------------------------------------------------------------------------


def _cpu_per_call(fn: Any, rounds: int) -> float:
    """Median µs of CPU per call over 5 batches."""
    out = []
    for _ in range(5):
        t0 = time.process_time()
        for _ in range(rounds):
            fn()
        out.append((time.process_time() - t0) / rounds * 1e6)
    return statistics.median(out)


def _filtered(body: bytes, names: frozenset[str]) -> bytes:
    """The body prometheus_client answers to `?name[]=<names>` (its `restricted_registry`)."""
    from prometheus_client import generate_latest

    return generate_latest(vllm_registry().restricted_registry(sorted(names)))  # type: ignore[arg-type]


def parse_rows(rounds: int) -> list[Row]:
    full = vllm_metrics_body()
    fast = _filtered(full, fetch_names("vllm", perf=False))
    slow = _filtered(full, fetch_names("vllm", perf=True))
    cases = [
        ("parse, whole body (before)", full, False, False),
        ("parse, whole body + histograms (before, 1/s)", full, True, False),
        ("parse, filtered body, every line changed", fast, False, False),
        ("parse, filtered body, unchanged lines memoised (now)", fast, False, True),
        ("parse, filtered + sums/counts (now, 1/s)", slow, True, True),
    ]
    out = []
    for label, body, perf, memo in cases:
        memos: dict[bytes, Any] = {}

        def one(
            b: bytes = body, p: bool = perf, m: dict[bytes, Any] | None = memos if memo else None
        ) -> None:
            read_pod_sample(b, "vllm", 0.0, perf=p, memo=m)

        us = _cpu_per_call(one, rounds)
        out.append(Row(label, None, us, "µs CPU", f"{len(body) / 1024:.1f} KB body"))
    return out


# --- simulated pods in child processes ------------------------------------------------------------


def _serve_sim_pods(count: int, ports: Any, ready: Any) -> None:
    from modelsim.fleet import PodSpec
    from modelsim.metrics_ports import MetricsPorts

    async def main() -> None:
        fleet = MetricsPorts(count, PodSpec(profile="h100-llama3-8b"))
        for i, port in enumerate(await fleet.start()):
            ports[i] = port
        ready.set()
        await asyncio.Event().wait()

    run_loop(main())


class SimProcesses:
    """`count` simulated pods' /metrics split over `processes` child processes."""

    def __init__(self, count: int, processes: int = 1) -> None:
        ctx = multiprocessing.get_context("spawn")
        sizes = [count // processes + (i < count % processes) for i in range(processes)]
        self._children = []
        self._ports = []
        for size in sizes:
            ports, ready = ctx.Array("i", size), ctx.Event()
            child = ctx.Process(target=_serve_sim_pods, args=(size, ports, ready), daemon=True)
            child.start()
            self._children.append((child, ready))
            self._ports.append(ports)

    def __enter__(self) -> list[int]:
        for _child, ready in self._children:
            if not ready.wait(120):
                raise RuntimeError("simulated pods did not start")
        return [int(p) for ports in self._ports for p in ports[:]]

    @property
    def pids(self) -> list[int]:
        return [c.pid for c, _ in self._children if c.pid is not None]

    def __exit__(self, *exc: object) -> None:
        for child, _ in self._children:
            child.terminate()
        for child, _ in self._children:
            child.join(10)


def _pool(ports: list[int]) -> EndpointPool:
    pool = EndpointPool()
    pool.set_endpoints(
        Endpoint(name=f"pod-{i}", address="127.0.0.1", port=p, engine="vllm") for i, p in enumerate(ports)
    )
    return pool


@dataclass
class _Run:
    scrapes: float
    cpu_s: float
    metered_s: float
    seconds: float
    fresh_shares: list[float]
    gc_pause_s: float = 0.0  # the longest full collection while measuring


class _GcPauses:
    """The longest full (generation 2) collection between `start` and `stop` (gc.callbacks)."""

    def __init__(self) -> None:
        self.longest = 0.0
        self._t = 0.0

    def __call__(self, phase: str, info: dict[str, int]) -> None:
        if phase == "start":
            self._t = time.perf_counter()
        elif info.get("generation") == 2:
            self.longest = max(self.longest, time.perf_counter() - self._t)

    def __enter__(self) -> _GcPauses:
        gc.callbacks.append(self)
        return self

    def __exit__(self, *exc: object) -> None:
        if self in gc.callbacks:
            gc.callbacks.remove(self)


async def _scrape_for(
    pool: EndpointPool, cfg: Scrape, warmup: float, seconds: float, *, gc_policy: bool = True
) -> _Run:
    """One scraper over `pool` (with the gateway's GC policy unless `gc_policy` is off)."""
    scraper = Scraper(pool, cfg, measure_speed=False)
    task = asyncio.create_task(scraper.run())
    policy = asyncio.create_task(GcPolicy(warmup_s=max(0.0, warmup - 0.5)).run()) if gc_policy else None
    count = "fleetgate_scrape_duration_seconds_count"
    limit = 2 * cfg.interval_ms / 1000
    shares: list[float] = []
    pauses = _GcPauses()
    try:
        await asyncio.sleep(warmup)
        reg = scraper.registry
        n0, m0 = (
            reg.get_sample_value(count) or 0.0,
            reg.get_sample_value("fleetgate_scrape_cpu_seconds_total"),
        )
        pauses.__enter__()
        cpu0, t0 = time.process_time(), time.monotonic()
        while time.monotonic() - t0 < seconds:
            await asyncio.sleep(0.05)
            now = time.monotonic()
            pods = pool.pods()
            fresh = sum(1 for p in pods if not p.stale and p.metrics_age(now) <= limit)
            shares.append(fresh / len(pods))
        n1, m1 = (
            reg.get_sample_value(count) or 0.0,
            reg.get_sample_value("fleetgate_scrape_cpu_seconds_total"),
        )
        cpu1, t1 = time.process_time(), time.monotonic()
    finally:
        pauses.__exit__()
        tasks = [task] if policy is None else [task, policy]
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
    return _Run(n1 - n0, cpu1 - cpu0, (m1 or 0.0) - (m0 or 0.0), t1 - t0, shares, pauses.longest)


# --- 2. whole scrapes -----------------------------------------------------------------------------


def whole_scrape_rows(pods: int, seconds: float) -> list[Row]:
    out = []
    with SimProcesses(pods) as ports:
        for label, filt in (("unfiltered (before)", False), ("filtered (now)", True)):
            cfg = Scrape(interval_ms=20, filter=filt, idle_after_scrapes=0, cpu_budget_cores=0, engine="vllm")
            r = run_loop(_scrape_for(_pool(ports), cfg, 1.5, seconds))
            us = r.cpu_s / max(r.scrapes, 1) * 1e6
            out.append(Row(f"gateway CPU per scrape, {label}", pods, us, "µs CPU", "fetch+parse+map"))
            out.append(Row(f"scrapes/s one core sustains, {label}", pods, 1e6 / us, "scrapes/s"))
            if filt:
                metered = r.metered_s / max(r.scrapes, 1) * 1e6
                out.append(Row("budget's metered share of a scrape", pods, metered, "µs CPU", "cpu_meter"))
    return out


# --- 3. the pod's side ----------------------------------------------------------------------------


class _VllmRouting:
    """vLLM's routing of /metrics without FastAPI (used when fastapi is not installed): the exact
    path renders the whole registry, ignoring `name[]` (prometheus-fastapi-instrumentator's route),
    any other /metrics path reaches the prometheus_client app (vLLM's Mount and its path regex)."""

    def __init__(self, registry: Any) -> None:
        from prometheus_client import make_asgi_app

        self._registry = registry
        self._mounted = make_asgi_app(registry)

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        from prometheus_client import generate_latest

        if scope["type"] == "http" and scope["path"] == "/metrics":
            body = generate_latest(self._registry)
            await send({"type": "http.response.start", "status": 200, "headers": []})
            await send({"type": "http.response.body", "body": body})
        else:
            await self._mounted(scope, receive, send)


def _vllm_api_server(registry: Any, completions: bool = False) -> tuple[Any, bool]:
    """(app, exact): vLLM's API server /metrics wiring (`vllm/entrypoints/serve/instrumentator/
    metrics.py`, CORS as `build_app` adds it) when fastapi and prometheus-fastapi-instrumentator are
    installed (the `bench` extra), else `_VllmRouting` (same routing, no FastAPI per-request cost).
    `completions`: with vLLM-shaped `/v1/completions` and `/v1/models` routes, registered before
    the metrics routes as `build_app` includes its router before `mount_metrics`."""
    try:
        import re

        from fastapi import FastAPI
        from fastapi.middleware.cors import CORSMiddleware
        from prometheus_client import make_asgi_app
        from prometheus_fastapi_instrumentator import Instrumentator
        from starlette.routing import Mount
    except ImportError:
        return _VllmRouting(registry), False
    app = FastAPI()
    if completions:
        add_completion_routes(app, registry)
    excluded = ["/metrics", "/health", "/health/decode", "/load", "/ping", "/version", "/server_info"]
    Instrumentator(excluded_handlers=excluded, registry=registry).add().instrument(app).expose(app)
    route = Mount("/metrics", make_asgi_app(registry=registry))
    route.path_regex = re.compile("^/metrics(?P<path>.*)$")
    app.routes.append(route)
    app.add_middleware(CORSMiddleware, allow_origins=["*"], allow_methods=["*"], allow_headers=["*"])
    return app, True


def _serve_prometheus_app(port_out: Any, ready: Any, wiring: str = "bare") -> None:
    """vLLM's metric set under uvicorn on uvloop, as vLLM's API server runs it: `bare` is
    prometheus_client's ASGI app alone, `vllm` the API server's wiring (`_vllm_api_server`),
    `traffic` that wiring with the completions routes (`bench.vllm_completions`)."""
    import uvicorn
    from prometheus_client import make_asgi_app

    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    port_out.value = sock.getsockname()[1]
    registry = vllm_registry()
    app = make_asgi_app(registry) if wiring == "bare" else _vllm_api_server(registry, wiring == "traffic")[0]
    config = uvicorn.Config(app, lifespan="off", log_level="warning", access_log=False, timeout_keep_alive=5)
    server = uvicorn.Server(config)

    async def main() -> None:
        task = asyncio.create_task(server.serve(sockets=[sock]))
        while not server.started:  # noqa: ASYNC110 - uvicorn exposes no started event
            await asyncio.sleep(0.01)
        ready.set()
        await task

    run_loop(main())


def _serve_vllm_app(port_out: Any, ready: Any) -> None:
    _serve_prometheus_app(port_out, ready, "vllm")


def _serve_traffic_app(port_out: Any, ready: Any) -> None:
    _serve_prometheus_app(port_out, ready, "traffic")


def _serve_sim_pod(port_out: Any, ready: Any) -> None:
    """One full simulator pod (its uvicorn app), as the tests and the demo run it."""
    from modelsim.fleet import PodSpec, SimFleet

    async def main() -> None:
        async with SimFleet([PodSpec(profile="h100-llama3-8b")]) as fleet:
            port_out.value = fleet.pods[0].port
            ready.set()
            await asyncio.Event().wait()

    run_loop(main())


async def _server_cpu(
    pool: EndpointPool, cfg: Scrape, pid: int, seconds: float
) -> tuple[float, float, float, bool]:
    """(CPU seconds of process `pid`, wall seconds, scrapes, whether the pod ignored the filter)
    while one scraper scrapes `pool`'s one pod."""
    scraper = Scraper(pool, cfg, measure_speed=True)
    task = asyncio.create_task(scraper.run())
    count = "fleetgate_scrape_duration_seconds_count"
    await asyncio.sleep(2.5)  # past the first scrapes and `idleAfterScrapes` quiet ones
    n0, c0, t0 = scraper.registry.get_sample_value(count) or 0.0, process_cpu_clock(pid), time.monotonic()
    await asyncio.sleep(seconds)
    n1, c1, t1 = scraper.registry.get_sample_value(count) or 0.0, process_cpu_clock(pid), time.monotonic()
    full = scraper.ignores_filter(pool.pods()[0].name)
    task.cancel()
    await asyncio.gather(task, return_exceptions=True)
    return c1 - c0, t1 - t0, n1 - n0, full


def render_rows(rounds: int) -> list[Row]:
    """prometheus_client's own render of vLLM's metric set, whole and filtered (no HTTP)."""
    from prometheus_client import generate_latest

    reg = vllm_registry()
    fast = reg.restricted_registry(sorted(fetch_names("vllm", perf=False)))
    out = []
    for label, target in (("whole body (before)", reg), ("filtered (now)", fast)):
        us = _cpu_per_call(lambda t=target: generate_latest(t), rounds)  # type: ignore[misc]
        out.append(Row(f"prometheus_client render, {label}", 1, us, "µs CPU", "in process, no HTTP"))
    return out


async def _asgi_get(app: Any, path: str, query: bytes) -> None:
    """One GET through an ASGI app in process, with the scraper's headers (no socket, no uvicorn)."""
    scope = {
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "method": "GET",
        "scheme": "http",
        "path": path,
        "raw_path": path.encode(),
        "root_path": "",
        "query_string": query,
        "headers": [
            (b"host", b"pod"),
            (b"accept-encoding", b"identity"),
            (b"user-agent", b"fleetgate-scraper"),
        ],
        "client": ("127.0.0.1", 1),
        "server": ("127.0.0.1", 8000),
    }

    async def receive() -> dict[str, Any]:
        return {"type": "http.request", "body": b"", "more_body": False}

    async def send(message: dict[str, Any]) -> None:
        return None

    await app(scope, receive, send)


def asgi_rows(rounds: int) -> list[Row]:
    """µs of CPU per scrape request through vLLM's API-server wiring in process (FastAPI, CORS,
    the instrumentator's middleware, the Mount, prometheus_client's render), warm: what a scrape
    costs the pod beyond uvicorn's HTTP handling, per set of families asked for."""
    from urllib.parse import urlencode

    app, exact = _vllm_api_server(vllm_registry(), completions=True)
    if not exact:
        return []
    fast = fetch_names("vllm", perf=False)
    cases = (
        ("fast scrape with cache config and prefix counters (before)", fast | _NOT_ROUTING),
        ("fast scrape (now)", fast),
        ("slow scrape with the latency sums/counts (1/s with an agent)", fetch_names("vllm", perf=True)),
    )

    async def per_call(query: bytes) -> float:
        for _ in range(20):
            await _asgi_get(app, "/metrics/", query)
        out = []
        for _ in range(5):
            t0 = time.process_time()
            for _ in range(rounds):
                await _asgi_get(app, "/metrics/", query)
            out.append((time.process_time() - t0) / rounds * 1e6)
        return statistics.median(out)

    rows = []
    for label, names in cases:
        query = urlencode([("name[]", n) for n in sorted(names)]).encode()
        us = run_loop(per_call(query))
        note = f"{len(names)} names; in process, no socket; warm"
        rows.append(Row(f"vLLM API server wiring, one /metrics/ request: {label}", 1, us, "µs CPU", note))
    return rows


@dataclass(frozen=True)
class _PodCase:
    label: str
    filt: bool
    slash: bool  # vLLM's filtered scrapes at /metrics/ (now) or at /metrics (the product before)
    idle: bool  # defaults: an idle unchanged pod at idleIntervalMs; else every 100 ms (under traffic)


_CASES = (
    _PodCase("unfiltered, 10 scrapes/s (before)", False, True, False),
    _PodCase("name[] at /metrics, 10 scrapes/s (before)", True, False, False),
    _PodCase("name[] at /metrics/, 10 scrapes/s, server otherwise idle (now)", True, True, False),
    _PodCase("name[] at /metrics/, idle pod at idleIntervalMs (now)", True, True, True),
)


def pod_side_rows(seconds: float) -> list[Row]:
    """The pod's CPU under one gateway's scrapes, net of its idle CPU over the same length, read
    from the kernel's per-process CPU clock (ns, not 10 ms ticks)."""
    ctx = multiprocessing.get_context("spawn")
    out = render_rows(200)
    _app, exact = _vllm_api_server(vllm_registry())
    vllm_label = "vLLM API server wiring" + ("" if exact else " (routing only: fastapi not installed)")
    targets = (
        ("prometheus_client app alone", _serve_prometheus_app, _CASES),
        (vllm_label, _serve_vllm_app, _CASES),
        ("simulator pod", _serve_sim_pod, (_CASES[0], _CASES[2])),
    )
    for label, target, cases in targets:
        port, ready = ctx.Value("i", 0), ctx.Event()
        child = ctx.Process(target=target, args=(port, ready), daemon=True)
        child.start()
        try:
            if not ready.wait(60) or child.pid is None:
                raise RuntimeError(f"{label} did not start")
            time.sleep(0.5)
            c0 = process_cpu_clock(child.pid)
            time.sleep(seconds)
            idle = (process_cpu_clock(child.pid) - c0) / seconds
            for case in cases:
                cfg = Scrape(
                    interval_ms=INTERVAL_MS,
                    filter=case.filt,
                    idle_after_scrapes=3 if case.idle else 0,
                    engine="vllm",
                )
                saved = FILTERED_BASE.pop("vllm") if not case.slash else None
                try:
                    cpu, wall, n, full = run_loop(_server_cpu(_pool([port.value]), cfg, child.pid, seconds))
                finally:
                    if saved is not None:
                        FILTERED_BASE["vllm"] = saved
                share = max(0.0, cpu / wall - idle) * 100
                per = max(0.0, cpu - idle * wall) / max(n, 1) * 1e6
                body = "whole body" if full or not case.filt else "filtered body"
                note = (
                    f"{n / wall:.1f} scrapes/s, {per:,.0f} µs each, {body}; idle {idle * 100:.2f}% subtracted"
                )
                out.append(Row(f"{label}: {case.label}", 1, share, "% of a core", note))
        finally:
            child.terminate()
            child.join(10)
    return out


# --- 3b. the pod's side under traffic -------------------------------------------------------------


@dataclass(frozen=True)
class _Window:
    cpu_s: float  # the API server's CPU over the window
    wall_s: float
    scrapes: float
    requests: int  # completed by the load client
    events: int  # SSE chunks received by the load client
    failed: int


@dataclass(frozen=True)
class PairStats:
    """Per-pair differences B - A of the API server's CPU share (cores) and their spread."""

    diffs: list[float]
    scrapes_per_s: float

    @property
    def median(self) -> float:
        return statistics.median(self.diffs)

    def ci95(self) -> tuple[float, float]:
        """Mean ± Student's t 95% half-width (n - 1 degrees of freedom)."""
        mean = statistics.fmean(self.diffs)
        if len(self.diffs) < 2:
            return mean, float("nan")
        t = _T95.get(len(self.diffs) - 1, 2.0)
        return mean, t * statistics.stdev(self.diffs) / len(self.diffs) ** 0.5


_T95 = {1: 12.71, 2: 4.30, 3: 3.18, 4: 2.78, 5: 2.57, 6: 2.45, 7: 2.36, 8: 2.31, 9: 2.26, 10: 2.23, 11: 2.20}


def pair_stats(a: list[_Window], b: list[_Window]) -> PairStats:
    diffs = [wb.cpu_s / wb.wall_s - wa.cpu_s / wa.wall_s for wa, wb in zip(a, b, strict=True)]
    rate = sum(w.scrapes for w in b) / sum(w.wall_s for w in b)
    return PairStats(diffs, rate)


class _LoadClient:
    """`bench.vllm_completions.drive` in a child process: `streams` streamed completions kept open."""

    def __init__(self, port: int, streams: int, tokens: int) -> None:
        ctx = multiprocessing.get_context("spawn")
        self.counts = ctx.Array("q", 3)
        self._stop = ctx.Event()
        self._child = ctx.Process(
            target=drive, args=(port, streams, tokens, self.counts, self._stop), daemon=True
        )

    def snapshot(self) -> tuple[int, int, int]:
        with self.counts.get_lock():
            return self.counts[0], self.counts[1], self.counts[2]

    def __enter__(self) -> _LoadClient:
        self._child.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._child.join(15)
        if self._child.is_alive():
            self._child.terminate()
            self._child.join(5)


@dataclass(frozen=True)
class ScrapeCase:
    """What one gateway asks a pod under traffic in a B window."""

    label: str
    measure_speed: bool  # the 1/s scrape that adds the latency histograms' sums/counts (an agent)
    add: frozenset[str] = frozenset()  # sample names added to every fast scrape (the product before)
    gateways: int = 1  # as many pool entries for the pod: that many gateways' scrapes (more signal)


# Families the fast scrape asked for before they moved to the slow one (engines.py `slow_only`):
# the cache geometry is fixed at start-up and the prefix counters feed only the hit-rate window.
_NOT_ROUTING = frozenset(
    {
        "vllm:cache_config_info",
        "vllm:prefix_cache_hits_total",
        "vllm:prefix_cache_queries_total",
        "vllm:gpu_prefix_cache_hits_total",
        "vllm:gpu_prefix_cache_queries_total",
        "vllm:gpu_prefix_cache_hit_rate",
    }
)
SCRAPE_CASES = (
    ScrapeCase("fast scrapes with cache config and prefix counters (before), no agent", False, _NOT_ROUTING),
    ScrapeCase("fast scrapes (now), no agent", False),
    ScrapeCase("fast scrapes (now) + 1/s latency sums (agent configured)", True),
    ScrapeCase("4 gateways' fast scrapes (no agent)", False, gateways=4),
)


def _fetch_with(add: frozenset[str]) -> Any:
    def names(engine: Any, *, perf: bool, slow: bool | None = None) -> frozenset[str]:
        return fetch_names(engine, perf=perf, slow=slow) | add

    return names


async def _window(
    pid: int, client: _LoadClient, seconds: float, settle: float, case: ScrapeCase | None, port: int
) -> _Window:
    """One measurement window of the API server's CPU: traffic only (`case` None) or traffic plus
    one gateway scraper at the fast interval (its first scrapes and connection inside the
    unmeasured `settle`)."""
    from cluster_gateway.metrics import scraper as scraper_module

    fast = Scrape(interval_ms=INTERVAL_MS, filter=True, idle_after_scrapes=0, engine="vllm")
    pool = _pool([port] * (case.gateways if case is not None else 1))
    scraper = Scraper(pool, fast, measure_speed=case.measure_speed) if case is not None else None
    if case is not None and case.add:
        scraper_module.fetch_names = _fetch_with(case.add)  # type: ignore[assignment]
    task = asyncio.create_task(scraper.run()) if scraper is not None else None
    count = "fleetgate_scrape_duration_seconds_count"

    def scrapes() -> float:
        return (scraper.registry.get_sample_value(count) or 0.0) if scraper is not None else 0.0

    try:
        await asyncio.sleep(settle)
        n0, (r0, e0, f0), c0, t0 = scrapes(), client.snapshot(), process_cpu_clock(pid), time.monotonic()
        await asyncio.sleep(seconds)
        n1, (r1, e1, f1), c1, t1 = scrapes(), client.snapshot(), process_cpu_clock(pid), time.monotonic()
    finally:
        if task is not None:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
        scraper_module.fetch_names = fetch_names  # type: ignore[assignment]
    return _Window(c1 - c0, t1 - t0, n1 - n0, r1 - r0, e1 - e0, f1 - f0)


async def _ab_windows(
    pid: int, client: _LoadClient, port: int, pairs: int, seconds: float, cases: tuple[ScrapeCase, ...]
) -> list[list[_Window]]:
    """`pairs` rounds of one window without scrapes (index 0) and one per case; the order rotates
    each round (A B C, B C A, ...) so a drift in the machine's load falls on every case alike."""
    slots: list[ScrapeCase | None] = [None, *cases]
    out: list[list[_Window]] = [[] for _ in slots]
    for i in range(pairs):
        for j in [(i + k) % len(slots) for k in range(len(slots))]:
            out[j].append(await _window(pid, client, seconds, 0.6, slots[j], port))
    return out


@dataclass(frozen=True)
class TrafficLevel:
    streams: int  # concurrent streamed completions kept open
    tokens: int = 50  # chunks per completion (one per 20 ms: a 1 s stream)


TRAFFIC_LEVELS = (TrafficLevel(8), TrafficLevel(32))  # ~8 and ~32 req/s of 1 s streams: 400, 1,600 chunks/s


def traffic_rows(
    pairs: int, seconds: float, levels: tuple[TrafficLevel, ...], cases: tuple[ScrapeCase, ...] = SCRAPE_CASES
) -> list[Row]:
    """A pod under traffic: vLLM's API-server wiring with a completions route, `level.streams`
    streams kept open by a load client in another process; alternating windows of traffic only (A)
    and traffic + one gateway's scraper at the fast interval (B, one per case). Each row is the
    median over the rounds of the B - A difference of the API server's CPU, as a share of a core."""
    ctx = multiprocessing.get_context("spawn")
    out = []
    for level in levels:
        port, ready = ctx.Value("i", 0), ctx.Event()
        child = ctx.Process(target=_serve_traffic_app, args=(port, ready), daemon=True)
        child.start()
        try:
            if not ready.wait(60) or child.pid is None:
                raise RuntimeError("the vLLM-wiring app did not start")
            with _LoadClient(port.value, level.streams, level.tokens) as client:
                time.sleep(1.5)  # streams open, caches warm
                runs = run_loop(_ab_windows(child.pid, client, port.value, pairs, seconds, cases))
            for case, b in zip(cases, runs[1:], strict=True):
                out += _traffic_level_rows(level, case, runs[0], b)
        finally:
            child.terminate()
            child.join(10)
    return out


def _traffic_level_rows(
    level: TrafficLevel, case: ScrapeCase, a: list[_Window], b: list[_Window]
) -> list[Row]:
    st = pair_stats(a, b)
    mean, half = st.ci95()
    wall = sum(w.wall_s for w in a + b)
    reqs = sum(w.requests for w in a + b) / wall
    chunks = sum(w.events for w in a + b) / wall
    failed = sum(w.failed for w in a + b)
    base = statistics.median(w.cpu_s / w.wall_s for w in a) * 100
    rate = max(st.scrapes_per_s, 1e-9)
    label = f"pod under traffic ({level.streams} streams), {case.label}: marginal API-server CPU"
    per_scrape = st.median / rate
    at_fast = f"; {per_scrape * 10 * 100:.2f}% at 10 scrapes/s" if case.gateways > 1 else ""
    note = (
        f"median of {len(st.diffs)} A/B pairs, min {min(st.diffs) * 100:.2f}, max {max(st.diffs) * 100:.2f}, "
        f"mean {mean * 100:.2f} ± {half * 100:.2f} (95%); {st.scrapes_per_s:.1f} scrapes/s, "
        f"{per_scrape * 1e6:,.0f} µs each{at_fast}; traffic {reqs:.1f} req/s, {chunks:,.0f} chunks/s, "
        f"server {base:.1f}% without scrapes" + (f"; {failed} failed requests" if failed else "")
    )
    return [Row(label, 1, st.median * 100, "% of a core", note)]


# --- 4. 1,000 pods --------------------------------------------------------------------------------


def fleet_rows(pods: int, seconds: float) -> list[Row]:
    """Freshness: every 50 ms the share of pods whose sample is at most 2 x the interval old; the
    figure is its 1st percentile over the samples (99% of the instants had at least that share)."""
    out = []
    with SimProcesses(pods, processes=2) as ports:
        strict = Scrape(interval_ms=INTERVAL_MS, idle_after_scrapes=0, cpu_budget_cores=1.0, engine="vllm")
        for label, policy in (("GC defaults (before)", False), ("GC policy (now)", True)):
            r = run_loop(_scrape_for(_pool(ports), strict, 3.0, seconds, gc_policy=policy))
            shares = sorted(r.fresh_shares)
            mean = statistics.fmean(shares) * 100
            p1 = shares[len(shares) // 100] * 100
            note = f"{len(shares)} samples 50 ms apart; worst {shares[0] * 100:.1f}%, mean {mean:.1f}%"
            out.append(Row(f"pods fresh (≤ 2x interval), p1 of samples, {label}", pods, p1, "%", note))
            out.append(Row(f"longest full GC pause, {label}", pods, r.gc_pause_s * 1000, "ms", "gen 2"))
            out.append(
                Row(f"scraper cores, every pod at 100 ms, {label}", pods, r.cpu_s / r.seconds, "cores")
            )
            out.append(Row(f"scrapes/s achieved, {label}", pods, r.scrapes / r.seconds, "scrapes/s"))
        adaptive = Scrape(interval_ms=INTERVAL_MS, engine="vllm")  # defaults: idle pods at 500 ms
        r = run_loop(_scrape_for(_pool(ports), adaptive, 3.0, seconds, gc_policy=True))
        note = "all idle"
        out.append(
            Row("scraper cores, defaults (idle pods at 500 ms)", pods, r.cpu_s / r.seconds, "cores", note)
        )
    return out


# --- report -------------------------------------------------------------------------------------


def rows(quick: bool = False, pods: int = 1000) -> list[Row]:
    """Every row of this bench (`fleetgate bench scale` calls this)."""
    seconds = 3.0 if quick else 8.0
    out = parse_rows(300 if quick else 2000)
    out += whole_scrape_rows(50, seconds)
    out += pod_side_rows(seconds)
    out += asgi_rows(100 if quick else 500)
    out += traffic_rows(3 if quick else 7, 2.0 if quick else 4.0, TRAFFIC_LEVELS)
    out += fleet_rows(pods, seconds)
    return out


def table(result: list[Row]) -> str:
    cells = [
        [
            r.measure,
            "" if r.pods is None else str(r.pods),
            f"{r.value:,.3g}" if r.value < 100 else f"{r.value:,.0f}",
            r.unit,
            r.note,
        ]
        for r in result
    ]
    return report.markdown_table(["measure", "pods", "value", "unit", "note"], cells, right={1, 2})


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    ap.add_argument("--quick", action="store_true", help="shorter measurements")
    ap.add_argument("--pods", type=int, default=1000, help="pods in the freshness run")
    args = ap.parse_args(argv)
    print(table(rows(args.quick, args.pods)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
