"""A cluster gateway composed from its config: pool, discovery, scraper, scheduler, admission, data paths.

Data flows one way: discovery writes pool membership, the scraper writes pod metrics, the
scheduler reads the pool, the proxy / ext_proc picker count in-flight requests in it. Everything
runs on one event loop; background components are plain coroutines run as tasks, so another
component (e.g. the Tier-2 capacity agent) plugs in with `add_background()` before `start()`.
"""

from __future__ import annotations

import asyncio
import logging
import os
import tempfile
from collections.abc import Awaitable, Callable
from contextlib import suppress

from prometheus_client import CollectorRegistry

from cluster_gateway.agent import CapacityAgent, load_agent_token
from cluster_gateway.data_plane import DataPlane
from cluster_gateway.discovery import build_discovery
from cluster_gateway.metrics.scraper import Scraper
from cluster_gateway.metrics.sharing import ScrapeShare, load_peer_token
from cluster_gateway.observability import GatewayMetrics
from cluster_gateway.pool import EndpointPool
from cluster_gateway.workers.process import WorkerSupervisor
from cluster_gateway.workers.publisher import PoolPublisher
from common.asgi import listen_socket
from common.config.gateway import GatewaySpec
from common.settle import settle

log = logging.getLogger("fleetgate.gateway")

BackgroundRun = Callable[[], Awaitable[None]]  # runs until cancelled


class ClusterGateway:
    """One Tier-1 gateway. `port` / `extproc_port` override the config (0 = any free port).

    `workers` > 1 starts that many serving processes in all (this one included) on the same ports;
    the control plane stays here, once (see `cluster_gateway/workers/`)."""

    def __init__(
        self,
        spec: GatewaySpec,
        *,
        port: int | None = None,
        extproc_port: int | None = None,
        registry: CollectorRegistry | None = None,
        workers: int = 1,
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
        self.share: ScrapeShare | None = None  # replicas split the scrapes (docs/scraping.md)
        if spec.scrape.sharing is not None:
            token = load_peer_token(spec.scrape.sharing)
            self.share = ScrapeShare(spec.scrape.sharing, self.pool, self.scraper, spec.host, token)
        self.data = DataPlane(spec, self.pool, self.metrics)
        # the request path, by the names the rest of the code (and tests) use
        self.scheduler = self.data.scheduler
        self.admission = self.data.admission
        self.dispatcher = self.data.dispatcher
        self.outliers = self.data.outliers
        # the queue gauge counts every process's queue (the workers' through the feed)
        self.metrics.watch_pool(self.pool, lambda: sum(self._queued_by_model().values()))
        self.workers = max(1, workers)
        self._feed_dir: tempfile.TemporaryDirectory[str] | None = None
        self.publisher: PoolPublisher | None = None
        self.supervisor: WorkerSupervisor | None = None
        if self.workers > 1:
            self._feed_dir = tempfile.TemporaryDirectory(prefix="fleetgate-feed-")
            self.publisher = PoolPublisher(self.pool, os.path.join(self._feed_dir.name, "feed.sock"))
            self.metrics.group = self.publisher.group  # /metrics: the whole process group's
            self.publisher.render = lambda: self._render_metrics()
            if self.data.releases is not None:  # ext_authz picks released through the feed
                self.publisher.release_local = self.data.releases.route
                self.publisher.own_outbox = self.data.releases.drain
        self.auth = self.data.auth  # built with the data plane: a missing secret is a ConfigError here
        self._background: list[tuple[str, BackgroundRun]] = [
            ("discovery", lambda: self.discovery.run(self.pool)),
            ("scraper", self.scraper.run),
            ("admission-recheck", self._recheck_admission),
        ]
        if self.publisher is not None:
            self._background.append(("worker-feed", self.publisher.run))
        if self.share is not None:
            self._background.append(("scrape-sharing", self.share.run))
        self.agent: CapacityAgent | None = None
        if spec.global_router is not None:  # Tier 2 link: stream capacity reports (token errors: ConfigError)
            self.agent = CapacityAgent(
                spec,
                self.pool,
                token=load_agent_token(spec.global_router),
                gateway_url=lambda: (spec.public_url or self.url) if self.bound_port else None,
                gateway_queued=self._queued_by_model,  # read-only: requests held here
            )
            self._background.append(("capacity-agent", self.agent.run))
        self._tasks: list[asyncio.Task[None]] = []
        self._serving = False
        self.bound_port = 0
        self.extproc_port = 0

    async def _render_metrics(self) -> bytes:
        return (await self.metrics.render_async())[0]

    def _queued_by_model(self) -> dict[str, int]:
        """Requests waiting in this process's admission queue and in every worker's."""
        own = self.admission.depth_by_model()
        if self.publisher is None:
            return own
        for model, n in self.publisher.queued_by_model().items():
            own[model] = own.get(model, 0) + n
        return own

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
        try:
            if self.publisher is not None:
                await self.publisher.start()
            for name, run in self._background:
                task = asyncio.create_task(self._supervise(name, run), name=f"gateway-{name}")
                self._tasks.append(task)
            reuse = self.workers > 1
            sock = listen_socket(self.host, self._port, reuse_port=reuse)
            extproc = (
                self._extproc_port if self.spec.ext_proc.enabled or self.spec.ext_authz.enabled else None
            )
            self._serving = True
            self.bound_port, self.extproc_port = await self.data.start(sock, extproc, reuse_port=reuse)
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
            if extproc is not None:
                log.info("ext_proc endpoint picker listening on %s:%d", self.host, self.extproc_port)
            if self.publisher is not None:
                self.supervisor = WorkerSupervisor(
                    self.spec,
                    self.workers,
                    self.publisher.path,
                    self.bound_port,
                    self.extproc_port if extproc is not None else None,
                )
                self.supervisor.start()
                log.info("started %d gateway worker process(es) on the same ports", self.workers - 1)
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

    async def drain(self) -> None:
        """What SIGTERM does (docs/drain.md): leave rotation while still serving — `/ready` 503, the
        agent's reports say draining — for `server.drainNoticeS` and until the router acknowledged
        that (bounded by `drainTimeoutS`), then stop accepting and let requests in flight finish."""
        srv = self.spec.server
        loop = asyncio.get_running_loop()
        began = loop.time()
        self.data.begin_drain()
        if self.supervisor is not None:
            self.supervisor.begin_drain()
        if self.agent is not None:
            self.agent.draining = True
        while loop.time() < began + max(srv.drain_notice_s, srv.drain_timeout_s):
            agent = self.agent
            told = agent is None or not agent.connected or agent.drain_acknowledged
            if told and loop.time() >= began + srv.drain_notice_s:
                break
            await asyncio.sleep(0.02)
        await self.stop(drain=True)

    async def stop(self, *, drain: bool = False) -> None:
        """Stop everything; `drain`: requests in flight get `server.drainTimeoutS` (else 5 s)."""
        stops = []
        if self.supervisor is not None:  # workers and this process stop serving together
            grace = self.spec.server.drain_timeout_s + 5.0 if drain else 8.0
            stops.append(self.supervisor.stop(grace_s=grace))
            self.supervisor = None
        if self._serving:
            self._serving = False
            stops.append(self.data.stop(drain=drain))
        try:
            await settle(*stops)  # a failed stop must not skip the control plane's below
        finally:
            for task in self._tasks:
                task.cancel()
            for task in self._tasks:
                with suppress(asyncio.CancelledError):
                    await task
            self._tasks.clear()
            if self.publisher is not None:
                await self.publisher.stop()
            if self._feed_dir is not None:
                self._feed_dir.cleanup()
                self._feed_dir = None

    async def __aenter__(self) -> ClusterGateway:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()
