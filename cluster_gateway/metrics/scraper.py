"""Keeps every pod's metrics and served models in the pool fresh, off the request path.

Each pod gets its own scrape loop (and its own models loop), so a hung or slow pod only delays
itself: the others keep their cadence. A shared semaphore bounds concurrent scrapes, and each
request has a hard deadline. Membership follows the pool: a supervisor loop starts loops for pods
discovery added and cancels those of removed pods, and marks pods stale whose last good scrape is
older than `maxStalenessMs` (so a pod stuck behind long timeouts cannot look fresh), and pods whose
`/metrics` body stays byte-identical while they are sent requests (`frozen.py`).
Everything runs on the gateway's event loop, so the per-scrape CPU cost is kept small: a lean
keep-alive HTTP client (`fetch.KeepAliveFetcher`) and a parse of only the needed lines (`engines`).
"""

from __future__ import annotations

import asyncio
import logging
import random
import time

import httpx
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from cluster_gateway.metrics.engines import read_pod_sample
from cluster_gateway.metrics.fetch import Fetcher, FetchError, HttpxFetcher, KeepAliveFetcher
from cluster_gateway.metrics.frozen import FrozenBodies
from cluster_gateway.metrics.perf_window import PerfWindow
from cluster_gateway.metrics.prefix_window import PrefixHitWindow
from cluster_gateway.metrics.served_models import ServedModels, parse_models_list, parse_tgi_info
from cluster_gateway.pool import Endpoint, EndpointPool, EngineType, PodState
from common.config.gateway import Scrape

log = logging.getLogger(__name__)

_DURATION_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0)
_MODELS_RETRY_S = 1.0  # until a pod's first /v1/models answer, retry at least this often
_PERF_EVERY_S = 1.0  # latency histograms (for the capacity agent) are read at most this often


class ScraperMetrics:
    """The scraper's own Prometheus metrics, in the registry it is given."""

    def __init__(self, registry: CollectorRegistry) -> None:
        self.duration = Histogram(
            "fleetgate_scrape_duration_seconds",
            "Time to fetch and parse one pod's /metrics",
            buckets=_DURATION_BUCKETS,
            registry=registry,
        )
        self.failures = Counter(
            "fleetgate_scrape_failures",
            "Failed pod scrapes by reason (timeout, connect, protocol, http_status, bad_body, frozen)",
            ["reason"],
            registry=registry,
        )
        self.stale_pods = Gauge(
            "fleetgate_scrape_stale_pods",
            "Pods whose metrics are stale (missed scrapes or too old)",
            registry=registry,
        )
        self.models_failures = Counter(
            "fleetgate_models_refresh_failures", "Failed GET /v1/models refreshes", registry=registry
        )


class Scraper:
    """Writes pod metrics (`record_scrape`/`record_scrape_failure`) and models into the pool.

    Without `client` it uses its own lean keep-alive connections (see `http_get`); with one (e.g.
    for TLS or a custom transport) it uses that client, which the caller keeps and closes.
    """

    def __init__(
        self,
        pool: EndpointPool,
        scrape: Scrape,
        client: httpx.AsyncClient | None = None,
        registry: CollectorRegistry | None = None,
        *,
        measure_speed: bool = True,
    ) -> None:
        """`measure_speed`: also read the pods' latency histograms (PodMetrics.perf). Only the
        capacity agent uses them, and they triple a scrape's parse time, so a gateway without an
        agent turns this off."""
        self._pool = pool
        self._measure_speed = measure_speed
        self._cfg = scrape
        self._interval_s = scrape.interval_ms / 1000
        self._timeout_s = scrape.timeout_ms / 1000
        self._max_staleness_s = scrape.max_staleness_ms / 1000
        self._default_engine: EngineType | None = None if scrape.engine == "auto" else scrape.engine
        self._fetcher: Fetcher = HttpxFetcher(client) if client is not None else KeepAliveFetcher()
        self._semaphore: asyncio.Semaphore | None = None
        self._workers: dict[str, list[asyncio.Task[None]]] = {}  # pod name → its scrape and models loops
        self._seen_version = -1
        self._detected: dict[str, tuple[Endpoint, EngineType]] = {}
        self._prefix = PrefixHitWindow()
        self._perf = PerfWindow()
        self._perf_read_at: dict[str, float] = {}
        self._frozen = FrozenBodies(scrape.frozen_after_scrapes)
        self.registry = registry if registry is not None else CollectorRegistry()
        self.metrics = ScraperMetrics(self.registry)

    # --- public API ------------------------------------------------------------------------
    async def run(self) -> None:
        """Scrape all pods until cancelled, following pool membership changes."""
        try:
            while True:
                self._sync_workers()
                self._mark_overdue_stale(time.monotonic())
                await asyncio.sleep(min(self._interval_s, 0.1))
        finally:
            await self._stop_workers()
            await self.aclose()

    async def scrape_once(self) -> None:
        """Scrape every pod currently in the pool once, concurrently (bounded)."""
        await asyncio.gather(*(self._scrape_pod(p.name) for p in self._pool.pods()))
        self._mark_overdue_stale(time.monotonic())

    async def refresh_models_once(self) -> None:
        """Fetch every pod's `GET /v1/models` once, concurrently (bounded)."""
        await asyncio.gather(*(self._refresh_models(p.name) for p in self._pool.pods()))

    async def aclose(self) -> None:
        """Close the connections this scraper opened (a given httpx client stays open)."""
        await self._fetcher.aclose()

    # --- membership ------------------------------------------------------------------------
    def _sync_workers(self) -> None:
        if self._pool.version == self._seen_version:
            return
        self._seen_version = self._pool.version
        current = {p.name for p in self._pool.pods()}
        for name in [n for n in self._workers if n not in current]:
            for task in self._workers.pop(name):
                task.cancel()
            self._detected.pop(name, None)
            self._fetcher.forget(name)
            self._prefix.forget(name)
            self._perf.forget(name)
            self._perf_read_at.pop(name, None)
            self._frozen.forget(name)
        for name in current:
            if name not in self._workers:  # loops read the pod's endpoint from the pool each time
                self._workers[name] = [
                    asyncio.create_task(self._scrape_loop(name), name=f"scrape {name}"),
                    asyncio.create_task(self._models_loop(name), name=f"models {name}"),
                ]

    async def _stop_workers(self) -> None:
        tasks = [t for loops in self._workers.values() for t in loops]
        self._workers.clear()
        self._seen_version = -1
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    # --- loops -----------------------------------------------------------------------------
    async def _scrape_loop(self, name: str) -> None:
        loop = asyncio.get_running_loop()
        # First scrape at once (a new pod becomes routable quickly), then a random phase so pods
        # discovered together do not all hit the semaphore and the network in the same instant.
        next_at = loop.time() - random.random() * self._interval_s
        while True:
            try:
                await self._scrape_pod(name)
            except Exception:  # a bug must not silently end this pod's scrapes
                log.exception("scrape loop error", extra={"pod": name})
            next_at += self._interval_s
            now = loop.time()
            if next_at < now:  # the scrape outlasted the interval: go on from now, no catch-up burst
                next_at = now
            await asyncio.sleep(next_at - now)

    async def _models_loop(self, name: str) -> None:
        fetched = False
        while True:
            try:
                fetched = await self._refresh_models(name) or fetched
            except Exception:
                log.exception("models loop error", extra={"pod": name})
            await asyncio.sleep(
                self._cfg.models_refresh_s if fetched else min(self._cfg.models_refresh_s, _MODELS_RETRY_S)
            )

    # --- one scrape ------------------------------------------------------------------------
    def _slots(self) -> asyncio.Semaphore:
        if self._semaphore is None:
            self._semaphore = asyncio.Semaphore(self._cfg.max_concurrency)
        return self._semaphore

    def _engine_for(self, pod_name: str, endpoint: Endpoint) -> EngineType | None:
        if endpoint.engine is not None:
            return endpoint.engine
        if self._default_engine is not None:
            return self._default_engine
        detected = self._detected.get(pod_name)
        return detected[1] if detected is not None and detected[0] == endpoint else None

    async def _fetch(self, endpoint: Endpoint, path: str, channel: str) -> bytes:
        async with self._slots():
            try:
                async with asyncio.timeout(self._timeout_s):
                    return await self._fetcher.get(endpoint, path, channel)
            except TimeoutError:
                raise FetchError("timeout", f"no answer within {self._cfg.timeout_ms} ms") from None

    async def _scrape_pod(self, name: str) -> None:
        pod = self._pool.get(name)
        if pod is None:
            return
        endpoint = pod.endpoint
        was_stale = pod.stale and pod.metrics is not None
        started = time.perf_counter()
        try:
            body = await self._fetch(endpoint, "/metrics", "metrics")
            if self._frozen.observe(name, body, pod.dispatched_since_scrape):
                self._mark_frozen(pod)
                return
            engine = self._engine_for(name, endpoint)
            scraped_at = time.monotonic()
            with_perf = (
                self._measure_speed
                and scraped_at - self._perf_read_at.get(name, -_PERF_EVERY_S) >= _PERF_EVERY_S
            )
            try:
                sample = read_pod_sample(body, engine, scraped_at, perf=with_perf)
            except ValueError as exc:
                self._detected.pop(name, None)  # a different engine may now answer at this name
                raise FetchError("bad_body", str(exc)) from None
            metrics = sample.metrics
            if engine is None:
                self._detected[name] = (endpoint, metrics.engine)
            if sample.prefix is not None:
                metrics.prefix_cache_hit_rate = self._prefix.update(
                    name, scraped_at, sample.prefix, metrics.prefix_cache_hit_rate
                )
            if self._measure_speed:
                if with_perf:
                    self._perf_read_at[name] = scraped_at
                metrics.perf = self._perf.update(name, scraped_at, sample.perf, metrics)
        except FetchError as exc:
            self.metrics.failures.labels(exc.reason).inc()
            self._pool.record_scrape_failure(name, self._cfg.stale_after_misses)
            self._check_overdue(name, time.monotonic())
            pod = self._pool.get(name)
            if pod is not None and pod.stale and pod.consecutive_failures == self._cfg.stale_after_misses:
                log.warning(
                    "pod metrics stale after %d failed scrapes: %s",
                    pod.consecutive_failures,
                    exc,
                    extra={"pod": name, "reason": exc.reason},
                )
            return
        finally:
            self.metrics.duration.observe(time.perf_counter() - started)
        self._pool.record_scrape(name, metrics)
        if was_stale:
            log.info("pod metrics fresh again", extra={"pod": name})

    # --- staleness -------------------------------------------------------------------------
    def _mark_frozen(self, pod: PodState) -> None:
        """Same body under traffic: keep the old metrics, but as stale (the filters stop trusting
        them); the pod is not dead (its scrapes answer), so its failure count stays."""
        self.metrics.failures.labels("frozen").inc()
        if not pod.stale:
            pod.stale = True
            log.warning(
                "pod metrics frozen: %d identical /metrics bodies while requests were sent to it",
                self._frozen.streak(pod.name),
                extra={"pod": pod.name},
            )

    def _check_overdue(self, name: str, now: float) -> None:
        pod = self._pool.get(name)
        if pod is not None and not pod.stale and pod.metrics_age(now) > self._max_staleness_s:
            pod.stale = True
            log.warning("pod metrics older than %d ms", self._cfg.max_staleness_ms, extra={"pod": name})

    def _mark_overdue_stale(self, now: float) -> None:
        stale = 0
        for pod in self._pool.pods():
            self._check_overdue(pod.name, now)
            stale += pod.stale
        self.metrics.stale_pods.set(stale)

    # --- models ----------------------------------------------------------------------------
    async def _refresh_models(self, name: str) -> bool:
        pod = self._pool.get(name)
        if pod is None:
            return False
        try:
            served = await self._served_models(pod.endpoint)
        except (FetchError, ValueError, KeyError, TypeError) as exc:
            self.metrics.models_failures.inc()
            log.debug("models refresh failed: %s", exc, extra={"pod": name})
            return False
        if served.exact:
            self._pool.set_catalog(name, served.base_models, served.adapters)
        else:
            self._pool.set_models(name, served.base_models)
        return True

    async def _served_models(self, endpoint: Endpoint) -> ServedModels:
        """Base models and adapters from the OpenAI `/v1/models` list; TGI without it answers `/info`."""
        try:
            body = await self._fetch(endpoint, "/v1/models", "models")
        except FetchError as exc:
            if exc.status != 404:
                raise
            return parse_tgi_info(await self._fetch(endpoint, "/info", "models"))
        return parse_models_list(body)


__all__ = ["Scraper", "ScraperMetrics"]
