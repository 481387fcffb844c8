"""Keeps every pod's metrics and served models in the pool fresh, off the request path.

One scheduling loop (`cadence.Cadence`) starts each pod's scrape when it is due: every `intervalMs`,
every `idleIntervalMs` for a pod that is quiet (no dispatches, unchanged sample), and only while the
scrape CPU budget has room, most overdue pods first. Each scrape is its own task, so a hung or slow
pod only delays itself. A shared semaphore bounds concurrent scrapes, and each request has a hard
deadline. Each pod also has a models loop. Membership follows the pool: pods discovery added are
queued and removed ones dropped; pods whose last good scrape is older than `maxStalenessMs` are
marked stale (so a pod stuck behind long timeouts cannot look fresh), and so are pods whose
`/metrics` body stays byte-identical while they are sent requests (`frozen.py`).

A scrape asks only for the samples routing reads (`?name[]=`, see `filtered.py`), plus the latency
histograms' sums and counts every `slowIntervalMs` (only when the capacity agent needs them); a pod
that ignores the filter is read from its full body. Everything runs on the gateway's event loop, so
the per-scrape CPU cost is kept small: a lean keep-alive HTTP client (`fetch.KeepAliveFetcher`) and
a parse of only the needed lines (`engines`).
"""

from __future__ import annotations

import asyncio
import logging
import math
import random
import time
from collections.abc import Callable
from dataclasses import dataclass

import httpx
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from cluster_gateway.metrics.cadence import Cadence
from cluster_gateway.metrics.cpu_meter import Metered
from cluster_gateway.metrics.engines import PodSample, PrefixCounters, fetch_names, read_pod_sample
from cluster_gateway.metrics.fetch import Fetcher, FetchError, HttpxFetcher, KeepAliveFetcher
from cluster_gateway.metrics.filtered import (
    FILTERED_BASE,
    PLAIN_PATH,
    REFUSED_STATUSES,
    ignores_filter,
    metrics_path,
)
from cluster_gateway.metrics.frozen import FrozenBodies
from cluster_gateway.metrics.perf_window import PerfWindow
from cluster_gateway.metrics.prefix_window import PrefixHitWindow
from cluster_gateway.metrics.served_models import ServedModels, parse_models_list, parse_tgi_info
from cluster_gateway.pool import Endpoint, EndpointPool, EngineType, PodMetrics, PodState
from common.config.gateway import Scrape
from common.promtext import LineMemo

log = logging.getLogger(__name__)

_DURATION_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0)
_MODELS_RETRY_S = 1.0  # until a pod's first /v1/models answer, retry at least this often
_TICK_S = 0.002  # the scheduling loop's shortest sleep: due scrapes start in batches this close
_MEMBERSHIP_S = 0.1  # pool membership and overdue pods are checked at least this often
_METER_EVERY = 8  # one scrape in this many is metered for the budget's CPU estimate


@dataclass(frozen=True, slots=True)
class _SlowFields:
    """What a pod's last slow scrape read of the families fast scrapes leave out (`slow_only`)."""

    block_size: int | None
    num_gpu_blocks: int | None
    prefix_cache_hit_rate: float | None
    prefix: PrefixCounters | None


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
        self.cpu = Counter(
            "fleetgate_scrape_cpu_seconds",
            "Gateway CPU spent in scrapes (the budget's measure; the loop's socket reads excluded)",
            registry=registry,
        )
        self.throttled = Counter(
            "fleetgate_scrape_budget_waits",
            "Times due scrapes waited because the scrape CPU budget (scrape.cpuBudgetCores) was spent",
            registry=registry,
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
        self._slow_interval_s = scrape.slow_interval_ms / 1000
        self._default_engine: EngineType | None = None if scrape.engine == "auto" else scrape.engine
        self._fetcher: Fetcher = HttpxFetcher(client) if client is not None else KeepAliveFetcher()
        self._semaphore: asyncio.Semaphore | None = None
        self._workers: dict[str, asyncio.Task[None]] = {}  # pod name → its models loop
        self._scrapes: set[asyncio.Task[None]] = set()  # scrapes in flight
        self._scrape_count = 0
        self.cadence = Cadence(
            self._interval_s,
            idle_interval_s=min(scrape.idle_interval_ms, scrape.max_staleness_ms / 2) / 1000,
            idle_after=scrape.idle_after_scrapes,
            budget_cores=scrape.cpu_budget_cores,
            dispatched=self._dispatched,
        )
        # a due pod this predicate says someone else keeps fresh (another replica) is not scraped
        self.skip: Callable[[str], bool] | None = None
        # called with each good sample this scraper took (scrape sharing publishes it to peers)
        self.on_sample: Callable[[str, PodMetrics], None] | None = None
        # requests other replicas sent a pod since its last sample (scrape sharing tells them)
        self.extra_dispatched: Callable[[str], int | None] | None = None
        self._full_body: dict[str, bool] = {}  # pod → it ignored the name filter last time
        self._plain_base: set[str] = set()  # pods that refused their engine's filtered path (filtered.py)
        self._last_key: dict[str, tuple[object, ...]] = {}  # pod → its last sample's routing fields
        self._memo: dict[str, LineMemo] = {}  # pod → its last body's parsed lines (promtext)
        self._last_body: dict[str, tuple[bool, bytes, PodSample]] = {}  # pod → (perf, body, sample)
        self._seen_version = -1
        self._detected: dict[str, tuple[Endpoint, EngineType]] = {}
        self._prefix = PrefixHitWindow()
        self._perf = PerfWindow()
        self._slow_read_at: dict[str, float] = {}  # pod → its last slow scrape (engines.fetch_names)
        self._slow_fields: dict[str, _SlowFields] = {}  # pod → what its last slow scrape read
        self._frozen = FrozenBodies(scrape.frozen_after_scrapes)
        self.registry = registry if registry is not None else CollectorRegistry()
        self.metrics = ScraperMetrics(self.registry)

    # --- public API ------------------------------------------------------------------------
    async def run(self) -> None:
        """Scrape all pods until cancelled, following pool membership changes."""
        cadence = self.cadence
        checked_at = -_MEMBERSHIP_S
        throttled = 0
        try:
            while True:
                now = time.monotonic()
                if now - checked_at >= _MEMBERSHIP_S:
                    checked_at = now
                    self._sync_workers()
                    self._mark_overdue_stale(now)
                for name in cadence.due(now, skip=self.skip):
                    task = asyncio.create_task(self._metered_scrape(name), name=f"scrape {name}")
                    self._scrapes.add(task)
                    task.add_done_callback(self._scrapes.discard)
                if cadence.throttled != throttled:
                    self.metrics.throttled.inc(cadence.throttled - throttled)
                    throttled = cadence.throttled
                wake = min(cadence.next_wakeup(now), checked_at + _MEMBERSHIP_S)
                await asyncio.sleep(max(_TICK_S, wake - time.monotonic()))
        finally:
            await self._stop_workers()
            await self.aclose()

    async def scrape_once(self) -> None:
        """Scrape every pod currently in the pool once, concurrently (bounded; no budget)."""
        await asyncio.gather(*(self._scrape_pod(p.name) for p in self._pool.pods()))
        self._mark_overdue_stale(time.monotonic())

    async def refresh_models_once(self) -> None:
        """Fetch every pod's `GET /v1/models` once, concurrently (bounded)."""
        await asyncio.gather(*(self._refresh_models(p.name) for p in self._pool.pods()))

    def ignores_filter(self, name: str) -> bool:
        """Whether pod `name` answered its last filtered scrape with its whole body (e.g. TGI)."""
        return self._full_body.get(name, False)

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
            self._workers.pop(name).cancel()
            self.cadence.remove(name)
            self._full_body.pop(name, None)
            self._plain_base.discard(name)
            self._last_key.pop(name, None)
            self._memo.pop(name, None)
            self._last_body.pop(name, None)
            self._detected.pop(name, None)
            self._fetcher.forget(name)
            self._prefix.forget(name)
            self._perf.forget(name)
            self._slow_read_at.pop(name, None)
            self._slow_fields.pop(name, None)
            self._frozen.forget(name)
        now = time.monotonic()
        for name in current:
            if name not in self._workers:  # scrapes read the pod's endpoint from the pool each time
                # first scrape at once (a new pod becomes routable quickly), then a random phase
                # so pods discovered together do not all hit the network in the same instant
                self.cadence.add(name, now, phase=random.random() * self._interval_s)
                self._workers[name] = asyncio.create_task(self._models_loop(name), name=f"models {name}")

    async def _stop_workers(self) -> None:
        tasks = [*self._workers.values(), *self._scrapes]
        for name in list(self._workers):
            self.cadence.remove(name)
        self._workers.clear()
        self._scrapes.clear()
        self._seen_version = -1
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    # --- loops -----------------------------------------------------------------------------
    def _dispatched(self, name: str) -> int:
        """Requests sent to the pod since its last sample: by this gateway, and by peer replicas."""
        pod = self._pool.get(name)
        own = 0 if pod is None else pod.dispatched_since_scrape
        extra = self.extra_dispatched(name) if self.extra_dispatched is not None else None
        return own + (extra or 0)

    async def _metered_scrape(self, name: str) -> None:
        """One scheduled scrape; every `_METER_EVERY`th is metered (reading the thread's CPU clock
        is a syscall, several µs on a virtualised host) and the others charged the estimate."""
        self._scrape_count += 1
        metered = Metered(self._scrape_pod(name)) if self._scrape_count % _METER_EVERY == 0 else None
        quiet = False
        try:
            quiet = await (metered if metered is not None else self._scrape_pod(name))
        except Exception:  # a bug must not silently end this pod's scrapes
            log.exception("scrape error", extra={"pod": name})
        finally:
            cpu_s = metered.cpu_s if metered is not None else None
            self.metrics.cpu.inc(cpu_s if cpu_s is not None else self.cadence.cost_s)
            self.cadence.finished(name, time.monotonic(), cpu_s=cpu_s, quiet=quiet)

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

    def _path(self, name: str, engine: EngineType | None, slow: bool, with_perf: bool) -> tuple[str, int]:
        """The scrape's path and how many sample names it asks for (0: unfiltered)."""
        if not self._cfg.filter:
            return PLAIN_PATH, 0
        names = fetch_names(engine, perf=with_perf and not self._full_body.get(name, False), slow=slow)
        base = (
            PLAIN_PATH
            if engine is None or name in self._plain_base
            else FILTERED_BASE.get(engine, PLAIN_PATH)
        )
        return metrics_path(names, base), len(names)

    async def _fetch_metrics(self, name: str, endpoint: Endpoint, path: str) -> bytes:
        """The metrics body at `path`; a pod that does not serve the engine's filtered base path
        (filtered.py: vLLM's `/metrics/`) is asked again at `/metrics`, and from then on."""
        try:
            return await self._fetch(endpoint, path, "metrics")
        except FetchError as exc:
            if exc.status not in REFUSED_STATUSES or not path.startswith(PLAIN_PATH + "/"):
                raise
            self._plain_base.add(name)
            log.info("pod does not serve %s; scraping /metrics", path.split("?", 1)[0], extra={"pod": name})
            return await self._fetch(endpoint, PLAIN_PATH + path[len(PLAIN_PATH) + 1 :], "metrics")

    async def _scrape_pod(self, name: str) -> bool:
        """One scrape into the pool; True when the pod was quiet (see `cadence`)."""
        pod = self._pool.get(name)
        if pod is None:
            return False
        endpoint = pod.endpoint
        was_stale = pod.stale and pod.metrics is not None
        started = time.perf_counter()
        engine = self._engine_for(name, endpoint)
        # the slow scrape (every slowIntervalMs, the first one included) also asks for the families
        # routing does not need fresh (`slow_only`) and, for the agent, the latency sums/counts
        slow = time.monotonic() - self._slow_read_at.get(name, -math.inf) >= self._slow_interval_s
        with_perf = self._measure_speed and slow
        path, asked = self._path(name, engine, slow, with_perf)
        try:
            body = await self._fetch_metrics(name, endpoint, path)
            full = asked == 0 or ignores_filter(body, asked)
            if asked:
                self._full_body[name] = full
            dispatched = self._dispatched(name)
            # a filtered slow scrape asked for more names: its body is another one, not compared
            if (full or not slow) and self._frozen.observe(name, body, dispatched):
                self._mark_frozen(pod)
                return False
            scraped_at = time.monotonic()
            try:
                sample = self._read(name, body, engine, scraped_at, with_perf)
            except ValueError as exc:
                self._memo.pop(name, None)
                self._last_body.pop(name, None)
                self._detected.pop(name, None)  # a different engine may now answer at this name
                raise FetchError("bad_body", str(exc)) from None
            metrics = sample.metrics
            if engine is None:
                self._detected[name] = (endpoint, metrics.engine)
            if sample.prefix is not None:
                metrics.prefix_cache_hit_rate = self._prefix.update(
                    name, scraped_at, sample.prefix, metrics.prefix_cache_hit_rate
                )
            prefix = self._slow_kept(name, sample, slow)
            quiet = self._quiet(name, sample, dispatched, prefix)
            if slow:
                self._slow_read_at[name] = scraped_at
            if self._measure_speed:
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
            return False
        finally:
            self.metrics.duration.observe(time.perf_counter() - started)
        self._pool.record_scrape(name, metrics)
        if self.on_sample is not None:
            self.on_sample(name, metrics)
        if was_stale:
            log.info("pod metrics fresh again", extra={"pod": name})
        return quiet

    def _read(
        self, name: str, body: bytes, engine: EngineType | None, scraped_at: float, perf: bool
    ) -> PodSample:
        """The body's sample; a body byte-identical to the pod's previous one (an idle pod) is not
        parsed again, and changed bodies reparse only their changed lines (the line memo)."""
        last = self._last_body.get(name)
        if last is not None and last[0] == perf and last[1] == body:
            last[2].metrics.scraped_at = scraped_at  # the pool's current sample: only newer
            return last[2]
        sample = read_pod_sample(body, engine, scraped_at, perf=perf, memo=self._memo.setdefault(name, {}))
        self._last_body[name] = (perf, body, sample)
        return sample

    def _slow_kept(self, name: str, sample: PodSample, slow: bool) -> PrefixCounters | None:
        """A slow scrape's `slow_only` fields are kept; a fast scrape's sample, which lacks them,
        gets the kept ones (a body that has them, such as a whole one, keeps its own). Returns
        the pod's newest prefix counters."""
        m = sample.metrics
        if slow:
            self._slow_fields[name] = _SlowFields(
                m.block_size, m.num_gpu_blocks, m.prefix_cache_hit_rate, sample.prefix
            )
            return sample.prefix
        kept = self._slow_fields.get(name)
        if kept is None:
            return sample.prefix
        if m.block_size is None and m.num_gpu_blocks is None:
            m.block_size, m.num_gpu_blocks = kept.block_size, kept.num_gpu_blocks
        if sample.prefix is None:
            m.prefix_cache_hit_rate = kept.prefix_cache_hit_rate
            return kept.prefix
        return sample.prefix

    def _quiet(self, name: str, sample: PodSample, dispatched: int, prefix: PrefixCounters | None) -> bool:
        """Nothing dispatched since the last scrape and the routing fields unchanged."""
        m = sample.metrics
        key = (
            m.engine,
            m.waiting,
            m.running,
            m.kv_usage,
            m.running_adapters,
            m.waiting_adapters,
            m.max_lora,
            m.batch_max_tokens,
            prefix,
        )
        previous = self._last_key.get(name)
        self._last_key[name] = key
        return dispatched == 0 and key == previous

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
