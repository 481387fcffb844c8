"""What serves requests in one process: scheduler, admission, dispatcher, outlier detection, the
embedded proxy's HTTP server and (when enabled) the ext_proc picker, over one `EndpointPool`.

The gateway process owns one (next to discovery, scraper and agent), and each extra worker process
(`cluster_gateway/workers/`) owns one over a replica of the pool, so both run the same code.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket

from cluster_gateway.auth import build_authenticator
from cluster_gateway.envoy_front.access_log import AccessLogService, OutcomeFeed
from cluster_gateway.envoy_front.contract import CHECK_PREFIX
from cluster_gateway.envoy_front.tls import server_credentials
from cluster_gateway.envoy_front.token import EnvoyToken
from cluster_gateway.extauthz.check import PickCheck
from cluster_gateway.extauthz.ledger import PickLedger
from cluster_gateway.extauthz.release import ReleaseRouter
from cluster_gateway.extproc.server import ExtProcServer, PickerService
from cluster_gateway.observability import GatewayMetrics
from cluster_gateway.pool import EndpointPool
from cluster_gateway.proxy.app import ProxyApp
from cluster_gateway.proxy.forward import Forwarder
from cluster_gateway.request_path.admission import AdmissionQueue
from cluster_gateway.request_path.dispatch import Dispatcher
from cluster_gateway.request_path.outliers import OutlierDetector
from cluster_gateway.scheduling.scheduler import Scheduler
from cluster_gateway.scheduling.types import ScheduleResult
from common.asgi import EmbeddedServer, server_config
from common.config.gateway import GatewaySpec

log = logging.getLogger("fleetgate.gateway")


class DataPlane:
    def __init__(
        self, spec: GatewaySpec, pool: EndpointPool, metrics: GatewayMetrics, worker: int = 0
    ) -> None:
        self.spec = spec
        self.pool = pool
        self.metrics = metrics
        self.worker = worker
        # One staleness bound for scraper and scheduler, so "fresh" means the same in both.
        self.scheduler = Scheduler(
            pool,
            spec.scheduling,
            staleness_s=spec.scrape.max_staleness_ms / 1000.0,
            dead_after_failures=spec.scrape.stale_after_misses,
        )
        self.admission: AdmissionQueue[ScheduleResult] = AdmissionQueue(
            spec.admission.queue_size, spec.admission.queue_timeout_ms / 1000.0
        )
        self.dispatcher = Dispatcher(pool, self.scheduler, self.admission, metrics)
        # one outlier detector for both data paths: a pod failing behind Envoy is out of the
        # proxy's picks too, and the reverse
        self.outliers = OutlierDetector(
            pool,
            spec.proxy.outlier_detection,
            on_eject=lambda _pod, reason, _s: metrics.ejections.labels(reason).inc(),
        )
        self.forwarder = Forwarder(pool, self.dispatcher, metrics, spec.proxy, outliers=self.outliers)
        # every serving process checks the router's credential (a missing secret: ConfigError here)
        self.auth = build_authenticator(spec.auth)
        self.envoy_token = EnvoyToken(spec.ext_proc.envoy_token_sha256)
        # Envoy's ext_authz check (extauthz/): picks on the HTTP port, ends via the access log
        self.check: PickCheck | None = None
        self.releases: ReleaseRouter | None = None
        if spec.ext_authz.enabled:
            self.check = PickCheck(
                self.dispatcher,
                self.outliers,
                metrics,
                PickLedger(worker, spec.ext_authz.slot_ttl_s),
                max_body_bytes=spec.proxy.max_body_bytes,
                max_json_depth=spec.proxy.max_json_depth,
                auth=self.auth,
                envoy_token=self.envoy_token,
                fallbacks=spec.ext_proc.fallback_endpoints,
            )
            self.releases = ReleaseRouter(worker, self.check.release)
        self._expiry: asyncio.Task[None] | None = None
        self._server: EmbeddedServer | None = None
        self._extproc: ExtProcServer | None = None
        self._app: ProxyApp | None = None
        self.draining = False

    async def start(
        self, sock: socket.socket, extproc_port: int | None, *, reuse_port: bool = False
    ) -> tuple[int, int]:
        """Serve HTTP on `sock` (and ext_proc on `extproc_port` when given); returns both bound ports."""
        app = ProxyApp(
            self.pool,
            self.dispatcher,
            self.forwarder,
            self.metrics,
            self.spec.proxy,
            worker=self.worker,
            access_log=self.spec.access_log,
            auth=self.auth,
            extra_routes=self.check.routes() if self.check is not None else None,
            prefix_route=(CHECK_PREFIX, self.check) if self.check is not None else None,
        )
        app.draining = self.draining
        self._app = app
        # Envoy's check connections skip uvicorn's ASGI machinery (common/fast_route.py)
        fast = None
        if self.check is not None:
            fast = (CHECK_PREFIX, self.check.answer, self.spec.proxy.max_body_bytes)
        self._server = EmbeddedServer(server_config(app, self.spec.server, fast_route=fast))
        http_port = await self._server.start_on(sock)
        if self.check is not None:
            self._expiry = asyncio.create_task(self._expire_picks(self.check))
        grpc_port = 0
        if extproc_port is not None:
            pcfg = self.spec.proxy
            service = PickerService(
                self.pool,
                self.dispatcher,
                self.metrics,
                self.spec.ext_proc,
                max_body_bytes=pcfg.max_body_bytes,
                max_json_depth=pcfg.max_json_depth,
                outliers=self.outliers,
                auth=self.auth,
            )
            # how Envoy's requests ended: outlier detection (unless the picker reads the response
            # headers itself) and the ext_authz releases
            feed = OutcomeFeed(
                self.pool,
                self.outliers,
                self.releases.route if self.releases is not None else None,
                outcomes=not self.spec.ext_proc.response_headers,
            )
            self._extproc = ExtProcServer(
                service,
                server_credentials(self.spec.ext_proc),
                reuse_port=reuse_port,
                access_log=AccessLogService(feed, self.envoy_token),
            )
            grpc_port = await self._extproc.start(self.spec.host, extproc_port)
        return http_port, grpc_port

    async def _expire_picks(self, check: PickCheck) -> None:
        while True:
            await asyncio.sleep(1.0)
            check.expire()

    def begin_drain(self) -> None:
        """Leave rotation and keep serving: `/ready` answers 503 from now on (docs/drain.md)."""
        self.draining = True
        if self._app is not None:
            self._app.draining = True

    async def stop(self, *, drain: bool = False) -> None:
        """Stop serving; `drain`: requests in flight get `server.drainTimeoutS` to finish (else 5 s)."""
        grace = self.spec.server.drain_timeout_s if drain else None
        if self._expiry is not None:
            self._expiry.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._expiry
            self._expiry = None
        if self._extproc is not None:
            await (self._extproc.stop() if grace is None else self._extproc.stop(float(grace)))
            self._extproc = None
        if self._server is not None:
            await self._server.stop(log, grace)
            self._server = None
        self.forwarder.close()
