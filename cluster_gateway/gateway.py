"""A cluster gateway composed from its config: pool, discovery, scraper, scheduler, admission, data paths.

Data flows one way: discovery writes pool membership, the scraper writes pod metrics, the
scheduler reads the pool, the proxy / ext_proc picker count in-flight requests in it. Everything
runs on one event loop; background components are plain coroutines run as tasks, so another
component (e.g. the Tier-2 capacity agent) plugs in with `add_background()` before `start()`.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from contextlib import suppress

import uvicorn
from prometheus_client import CollectorRegistry

from cluster_gateway.agent import CapacityAgent, load_agent_token
from cluster_gateway.auth import build_authenticator
from cluster_gateway.discovery import build_discovery
from cluster_gateway.extproc.server import ExtProcServer, PickerService
from cluster_gateway.metrics.scraper import Scraper
from cluster_gateway.observability import GatewayMetrics
from cluster_gateway.pool import EndpointPool
from cluster_gateway.proxy.admission import AdmissionQueue
from cluster_gateway.proxy.app import ProxyApp
from cluster_gateway.proxy.dispatch import Dispatcher
from cluster_gateway.proxy.forward import Forwarder
from cluster_gateway.proxy.upstream import UpstreamClients
from cluster_gateway.scheduling.scheduler import Scheduler
from cluster_gateway.scheduling.types import ScheduleResult
from common.asgi import EmbeddedServer, listen_socket
from common.config.gateway import GatewaySpec

log = logging.getLogger("fleetgate.gateway")

BackgroundRun = Callable[[], Awaitable[None]]  # runs until cancelled


class ClusterGateway:
    """One Tier-1 gateway. `port` / `extproc_port` override the config (0 = any free port)."""

    def __init__(
        self,
        spec: GatewaySpec,
        *,
        port: int | None = None,
        extproc_port: int | None = None,
        registry: CollectorRegistry | None = None,
    ) -> None:
        self.spec = spec
        self.host = spec.host
        self._port = spec.port if port is None else port
        self._extproc_port = spec.ext_proc.port if extproc_port is None else extproc_port
        self.registry = registry if registry is not None else CollectorRegistry()
        self.metrics = GatewayMetrics(self.registry)
        self.pool = EndpointPool()
        self.discovery = build_discovery(spec.discovery)
        # pods' latency histograms feed only the capacity agent's estimates: read them only for it
        self.scraper = Scraper(
            self.pool, spec.scrape, registry=self.registry, measure_speed=spec.global_router is not None
        )
        # One staleness bound for scraper and scheduler, so "fresh" means the same in both.
        self.scheduler = Scheduler(
            self.pool,
            spec.scheduling,
            staleness_s=spec.scrape.max_staleness_ms / 1000.0,
            dead_after_failures=spec.scrape.stale_after_misses,
        )
        self.admission: AdmissionQueue[ScheduleResult] = AdmissionQueue(
            spec.admission.queue_size, spec.admission.queue_timeout_ms / 1000.0
        )
        self.metrics.watch_pool(self.pool, lambda: len(self.admission))
        self.dispatcher = Dispatcher(self.pool, self.scheduler, self.admission, self.metrics)
        self.auth = build_authenticator(spec.auth)  # a missing secret: ConfigError at construction
        self._background: list[tuple[str, BackgroundRun]] = [
            ("discovery", lambda: self.discovery.run(self.pool)),
            ("scraper", self.scraper.run),
            ("admission-recheck", self._recheck_admission),
        ]
        self.agent: CapacityAgent | None = None
        if spec.global_router is not None:  # Tier 2 link: stream capacity reports (token errors: ConfigError)
            self.agent = CapacityAgent(
                spec,
                self.pool,
                token=load_agent_token(spec.global_router),
                gateway_url=lambda: (spec.public_url or self.url) if self.bound_port else None,
                gateway_queued=self.admission.depth_by_model,  # read-only: requests held here
            )
            self._background.append(("capacity-agent", self.agent.run))
        self._tasks: list[asyncio.Task[None]] = []
        self._clients: UpstreamClients | None = None
        self._server: EmbeddedServer | None = None
        self._extproc: ExtProcServer | None = None
        self.bound_port = 0
        self.extproc_port = 0

    # --- composition -----------------------------------------------------
    def add_background(self, name: str, run: BackgroundRun) -> None:
        """Run `run()` as a task for the gateway's lifetime (start → stop). Call before `start()`."""
        if self._tasks:
            raise RuntimeError("add_background() must be called before start()")
        self._background.append((name, run))

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.bound_port}"

    async def _recheck_admission(self) -> None:
        """Queued requests re-check once per scrape interval: a scrape may have freed a pod."""
        interval = self.spec.scrape.interval_ms / 1000.0
        while True:
            await asyncio.sleep(interval)
            self.admission.notify()

    # --- lifecycle -------------------------------------------------------
    async def start(self) -> None:
        for name, run in self._background:
            task = asyncio.create_task(self._supervise(name, run), name=f"gateway-{name}")
            self._tasks.append(task)
        pcfg = self.spec.proxy
        self._clients = UpstreamClients(pcfg, self.pool)
        forwarder = Forwarder(
            self._clients,
            self.dispatcher,
            self.metrics,
            max_attempts=pcfg.max_attempts,
            debug_headers=pcfg.debug_headers,
        )
        app = ProxyApp(self.pool, self.dispatcher, forwarder, self.metrics, pcfg, auth=self.auth)
        try:
            sock = listen_socket(self.host, self._port)
            config = uvicorn.Config(
                app,
                lifespan="off",
                log_level="warning",
                access_log=False,
                timeout_graceful_shutdown=5,
                # Longer than common load-balancer idle timeouts (60 s), so an LB never reuses a
                # connection the gateway is just closing (the classic keep-alive race → 502s).
                timeout_keep_alive=75,
                backlog=4096,
            )
            self._server = EmbeddedServer(config)
            self.bound_port = await self._server.start_on(sock)
            log.info(
                "cluster gateway %s listening on http://%s:%d",
                self.spec.cluster_id,
                self.host,
                self.bound_port,
            )
            if not self.auth.required and self.spec.global_router is not None:
                log.warning(
                    "auth.mode is none: anyone who reaches this gateway bypasses the global router's "
                    "keys and limits (set auth.mode: hmac; docs/security.md)"
                )
            if self.spec.ext_proc.enabled:
                service = PickerService(
                    self.pool,
                    self.dispatcher,
                    self.metrics,
                    self.spec.ext_proc,
                    max_body_bytes=pcfg.max_body_bytes,
                    auth=self.auth,
                )
                self._extproc = ExtProcServer(service)
                self.extproc_port = await self._extproc.start(self.host, self._extproc_port)
                log.info("ext_proc endpoint picker listening on %s:%d", self.host, self.extproc_port)
        except BaseException:
            await self.stop()
            raise

    async def _supervise(self, name: str, run: BackgroundRun) -> None:
        """Run a background component; a crash is logged and the component restarted after a pause."""
        while True:
            try:
                await run()
                return
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("background component %s failed; restarting in 1 s", name)
                await asyncio.sleep(1.0)

    async def stop(self) -> None:
        if self._extproc is not None:
            await self._extproc.stop()
            self._extproc = None
        if self._server is not None:
            await self._server.stop(log)
            self._server = None
        for task in self._tasks:
            task.cancel()
        for task in self._tasks:
            with suppress(asyncio.CancelledError):
                await task
        self._tasks.clear()
        if self._clients is not None:
            await self._clients.aclose()
            self._clients = None

    async def __aenter__(self) -> ClusterGateway:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()
