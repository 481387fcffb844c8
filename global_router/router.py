"""A global router composed from its config: fleet view, capacity server, limiter, selection, app.

With `redis` configured the fleet view and the rate limits are shared by every replica; without it
one replica keeps both in process. `http_port` / `grpc_port` override the config (0 = any free port).
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from typing import Any
from urllib.parse import urlsplit

import msgspec
import redis.asyncio as aioredis
from redis.asyncio.retry import Retry
from redis.backoff import NoBackoff

from common.asgi import EmbeddedServer, listen_socket, server_config
from common.config.loader import ConfigError
from common.config.router import CapacityServer as CapacityServerConfig
from common.config.router import GlobalRouterConfig
from common.control_thread import ControlThread
from common.settle import settle
from common.upstream import UpstreamPools
from global_router.app import RouterServices, build_app
from global_router.capacity_server import CapacityServer
from global_router.dispatch_tracker import DispatchTracker
from global_router.failover import ClusterHealth, RetryBudget
from global_router.fleet_mailbox import FleetMailbox
from global_router.fleet_view import FleetView, MemoryFleetView, RedisFleetView
from global_router.forward import Forwarder
from global_router.gateway_signer import GatewaySigner
from global_router.metrics import RouterMetrics
from global_router.ratelimit import RedisLimiter, build_limiter
from global_router.readiness import Readiness
from global_router.selection import ClusterSelector
from global_router.stream_lease import RedisStreamLease
from global_router.tenants import TenantDirectory
from global_router.workers import RouterWorkers

log = logging.getLogger("fleetgate.router")


def redis_client(url: str, timeout_s: float, max_connections: int = 64) -> aioredis.Redis:
    """A bounded pool of reused connections (a burst waits for one instead of opening hundreds) and
    no client-side retries: callers bound each call with their own (adaptive) timeout, and a dead
    Redis must fail fast into the fail mode. `timeout_s` is only the socket's last resort."""
    pool = aioredis.BlockingConnectionPool.from_url(
        url,
        max_connections=max_connections,
        timeout=timeout_s,
        socket_timeout=timeout_s,
        socket_connect_timeout=timeout_s,
        retry=Retry(NoBackoff(), 0),
        health_check_interval=0,
        driver_info=None,  # no CLIENT SETINFO: a new connection costs one round trip, not three
    )
    return aioredis.Redis(connection_pool=pool)


class GlobalRouter:
    def __init__(
        self,
        cfg: GlobalRouterConfig,
        *,
        http_port: int | None = None,
        grpc_port: int | None = None,
        fleet: FleetView | None = None,
        capacity_server: bool = True,
        workers: int = 1,
        reuse_port: bool = False,
    ) -> None:
        if workers > 1 and cfg.redis is None:
            raise ConfigError(
                f"--workers {workers}: worker processes share the fleet view and the rate limits "
                "through Redis; configure `redis` or run one worker"
            )
        self.cfg = cfg
        self.workers = workers
        self._reuse_port = reuse_port or workers > 1
        self._worker_procs: RouterWorkers | None = None
        self._http_port_cfg = cfg.port if http_port is None else http_port
        self._grpc_port_cfg = cfg.capacity.port if grpc_port is None else grpc_port
        self.replica_id = uuid.uuid4().hex[:8]
        try:
            self.redis: aioredis.Redis | None = (
                redis_client(cfg.redis.url, cfg.redis.max_timeout_s + 0.5, cfg.redis.max_connections)
                if cfg.redis is not None
                else None
            )
        except ValueError as exc:
            raise ConfigError(f"redis.url: {exc}") from None
        if fleet is not None:
            self.fleet: FleetView = fleet
        elif self.redis is not None and cfg.redis is not None:
            # a report lives as long as the router may route on it (static stability)
            ttl = max(cfg.redis.report_ttl_s, cfg.capacity.forget_after_s)
            self.fleet = RedisFleetView(self.redis, prefix=cfg.redis.key_prefix, ttl_s=ttl)
        else:
            self.fleet = MemoryFleetView(ttl_s=cfg.capacity.forget_after_s)
        self.metrics = RouterMetrics()
        self.tracker = DispatchTracker()
        self.health = ClusterHealth(cfg.failover)
        self.health.on_eject = lambda cid, s: log.warning("cluster %s ejected for %.1fs", cid, s)
        self.budget = RetryBudget(
            cfg.failover.retry_budget_ratio,
            min_retries=cfg.failover.min_retries,
            window_s=cfg.failover.retry_window_s,
        )
        self.selector = ClusterSelector(
            cfg.selection,
            stale_after_s=cfg.capacity.stale_after_s,
            forget_after_s=cfg.capacity.forget_after_s,
            tracker=self.tracker,
        )
        self.limiter = build_limiter(self.redis, cfg.redis, cfg.rate_limits, replica_id=self.replica_id)
        self.tenants = TenantDirectory.from_config(cfg)
        self.signer = GatewaySigner.from_agents(cfg.capacity.agents)  # ConfigError: a secret is missing
        self._with_capacity = capacity_server
        self.capacity: CapacityServer | None = None
        # the capacity streams run on their own thread and loop: data traffic cannot starve them
        self._control: ControlThread | None = None
        self._mailbox: FleetMailbox | None = None
        self._control_redis: aioredis.Redis | None = None
        self._upstreams: UpstreamPools | None = None
        self._server: EmbeddedServer | None = None
        self.readiness = Readiness(
            self.fleet, self.selector, self.redis.ping if self.redis is not None else None
        )
        self.http_port = 0
        self._stopped = False
        self.grpc_port = 0

    @property
    def url(self) -> str:
        return f"http://{self.cfg.host}:{self.http_port}"

    def _info(self) -> dict[str, Any]:
        view = "redis" if isinstance(self.fleet, RedisFleetView) else "memory"
        if isinstance(self.fleet, RedisFleetView) and not self.fleet.redis_ok:
            view = "redis (unreachable: local cache)"
        info: dict[str, Any] = {"replica": self.replica_id, "fleet_view": view}
        if isinstance(self.limiter, RedisLimiter):
            info["rate_limiter_redis"] = self.limiter.stats()
        return info

    async def start(self) -> None:
        self._stopped = False
        try:
            # reports arrive within one interval of an agent (re)connecting; until then, 503 not 404
            self.selector.start_warmup(self.cfg.capacity.stale_after_s)
            await self.fleet.start()
            await self.limiter.start()
            if self._with_capacity:
                await self._start_capacity()
            f = self.cfg.failover
            self._upstreams = UpstreamPools(
                max_connections=f.max_connections_per_gateway,
                connect_timeout_s=f.connect_timeout_s,
                idle_expiry_s=f.idle_connection_s,
            )
            forwarder = Forwarder(
                self._upstreams,
                f,
                health=self.health,
                budget=self.budget,
                tracker=self.tracker,
                metrics=self.metrics,
                signer=self.signer,
            )
            services = RouterServices(
                cfg=self.cfg,
                fleet=self.fleet,
                tenants=self.tenants,
                selector=self.selector,
                limiter=self.limiter,
                forwarder=forwarder,
                health=self.health,
                budget=self.budget,
                tracker=self.tracker,
                metrics=self.metrics,
                router_info=self._info,
                readiness=self.readiness,
            )
            sock = listen_socket(self.cfg.host, self._http_port_cfg, reuse_port=self._reuse_port)
            config = server_config(build_app(services), self.cfg.server)
            self._server = EmbeddedServer(config)
            self.http_port = await self._server.start_on(sock)
            self._pin_own_addresses()
            log.info("global router listening on http://%s:%d", self.cfg.host, self.http_port)
            if self.workers > 1:
                self._worker_procs = RouterWorkers(self.cfg, self.workers, self.http_port)
                self._worker_procs.start()
                log.info("started %d router worker process(es) on the same port", self.workers - 1)
            if self.cfg.allow_anonymous:
                log.warning("allowAnonymous is on: requests without an API key are served (trials only)")
            elif not self.cfg.tenants:
                log.warning("no tenants configured: every API request will be refused with 401")
        except BaseException:
            await self.stop()
            raise

    async def _start_capacity(self) -> None:
        """The capacity server on the control thread; accepted reports reach the fleet view
        through the mailbox, so a directive never waits for a busy data loop."""
        cap_cfg = msgspec.structs.replace(self.cfg.capacity, port=self._grpc_port_cfg)
        self._mailbox = FleetMailbox(self.fleet, asyncio.get_running_loop())
        self._mailbox.start()
        self._control = ControlThread("fleetgate-capacity")
        self._control.start()
        self.capacity = await self._control.run(self._build_capacity(cap_cfg, self._mailbox))
        self.grpc_port = self.capacity.port or 0

    async def _build_capacity(self, cap_cfg: CapacityServerConfig, mailbox: FleetMailbox) -> CapacityServer:
        """Runs on the control loop: its Redis client (the stream lease) belongs to that loop."""
        lease = None
        if self.cfg.redis is not None:  # one stream per cluster fleet-wide
            r = self.cfg.redis
            self._control_redis = redis_client(r.url, r.max_timeout_s + 0.5, 8)
            lease = RedisStreamLease(
                self._control_redis,
                prefix=r.key_prefix,
                ttl_s=self.cfg.capacity.stale_after_s,
                timeout_s=r.timeout_s,
            )
        # its series (reports accepted/refused, streams) on the router's /metrics
        server = CapacityServer(cap_cfg, mailbox, registry=self.metrics.registry, lease=lease)
        await server.start()
        return server

    async def _stop_capacity(self) -> None:
        capacity, self.capacity = self.capacity, None
        control, self._control = self._control, None
        if control is not None and control.alive:
            redis, self._control_redis = self._control_redis, None

            async def shut() -> None:
                if capacity is not None:
                    await capacity.stop()
                if redis is not None:
                    await redis.aclose()

            await control.run(shut())
            control.stop()
        if self._mailbox is not None:
            await self._mailbox.stop()
            self._mailbox = None

    def _pin_own_addresses(self) -> None:
        """Reports may not point the fleet at the router's own HTTP port or its Redis."""
        if self.capacity is None:
            return
        self.capacity.policy.add_own_address(self.cfg.host, self.http_port)
        if self.cfg.redis is not None:
            u = urlsplit(self.cfg.redis.url)
            if u.hostname:
                self.capacity.policy.add_own_address(u.hostname, u.port or 6379)

    async def drain(self) -> None:
        """What SIGTERM does (docs/drain.md): `/ready` 503 while still serving for
        `server.drainNoticeS` (the load balancer stops choosing this replica), then stop accepting
        and let requests in flight finish for up to `server.drainTimeoutS`, then stop."""
        self.readiness.draining = True
        if self._worker_procs is not None:
            self._worker_procs.begin_drain()
        await asyncio.sleep(self.cfg.server.drain_notice_s)  # the notice period itself, not a sync
        await self.stop(drain=True)

    async def stop(self, *, drain: bool = False) -> None:
        if self._stopped:  # after drain(), the CLI's `finally` stops again
            return
        self._stopped = True
        # The workers (each drains what it serves on SIGTERM) and this process's own server stop
        # together, as the gateway's do: one after the other, a stop could take two drain timeouts.
        stops = []
        if self._worker_procs is not None:
            stops.append(self._worker_procs.stop(self.cfg.server.drain_timeout_s + 5.0))
            self._worker_procs = None
        if self._server is not None:
            stops.append(self._server.stop(log, self.cfg.server.drain_timeout_s if drain else None))
            self._server = None
        try:
            await settle(*stops)  # a failed stop must not skip the control plane's below
        finally:
            await self._stop_capacity()
            await self.limiter.stop()
            await self.fleet.stop()
            if self._upstreams is not None:
                self._upstreams.close()
                self._upstreams = None
            if self.redis is not None:
                await self.redis.aclose()

    async def __aenter__(self) -> GlobalRouter:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()
