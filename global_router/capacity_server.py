"""The router's gRPC CapacityService: cluster agents stream reports in, directives flow back.

Each stream is authenticated once (bearer token → the one cluster it may speak for); a cluster has
one active stream at a time (a second is refused); every report is validated, checked against the
cluster's pins and plausibility caps (`report_policy`), published to the fleet view and answered with a Directive carrying the ack, the
report interval the router wants and whether an operator drained the cluster here. The standard
gRPC health service runs on the same port. TLS is on when `tlsCertFile` and `tlsKeyFile` are set.
"""

from __future__ import annotations

import logging
import math
import time
import uuid
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from typing import Protocol
from urllib.parse import urlsplit

import grpc
from grpc_health.v1 import health, health_pb2, health_pb2_grpc
from prometheus_client import CollectorRegistry, Gauge
from prometheus_client import Counter as PromCounter

from common.config.loader import ConfigError
from common.config.router import CapacityServer as CapacityServerConfig
from common.listen_error import ListenError
from common.proto.fleetgate.v1 import capacity_pb2, capacity_pb2_grpc
from common.tls import server_credentials
from global_router.agent_auth import AgentAuthenticator, AuthError
from global_router.fleet_view import ClusterState, state_from_report
from global_router.report_policy import PolicyRefusal, ReportPolicy
from global_router.stream_lease import RedisStreamLease

log = logging.getLogger(__name__)

SERVICE_NAME = "fleetgate.v1.CapacityService"


class CapacityMetrics:
    """Prometheus series of the capacity server, in the registry the router app exposes."""

    def __init__(self, registry: CollectorRegistry) -> None:
        self.reports = PromCounter(
            "fleetgate_capacity_reports",
            "Capacity reports received by the router, by outcome",
            ["result"],
            registry=registry,
        )
        self.refused = PromCounter(
            "fleetgate_capacity_reports_refused",
            "Reports or streams refused by the report policy (pins, caps, one stream per cluster)",
            ["cluster", "reason"],
            registry=registry,
        )
        self.streams = Gauge(
            "fleetgate_capacity_agent_streams", "Open agent report streams", registry=registry
        )


class ReportSink(Protocol):
    """Where accepted reports go: a fleet view, or the mailbox to one on another loop."""

    async def publish(self, state: ClusterState) -> None: ...

    def router_drained(self, cluster_id: str) -> bool: ...


class ReportError(ValueError):
    """A report that cannot be used; the message goes back to the agent in the directive."""


def validate_report(report: capacity_pb2.CapacityReport) -> None:
    """Reject reports the selection logic could be misled by (bad URL, NaN, out-of-range)."""
    url = urlsplit(report.gateway_url)
    if url.scheme not in ("http", "https") or not url.hostname:
        raise ReportError(f"gateway_url {report.gateway_url!r} is not an http(s) URL")
    if not math.isfinite(report.cost_per_gpu_hour) or report.cost_per_gpu_hour < 0:
        raise ReportError("cost_per_gpu_hour must be a finite number >= 0")
    names: set[str] = set()
    for i, m in enumerate(report.models):
        if not m.model:
            raise ReportError(f"models[{i}].model is empty")
        if m.model in names:
            raise ReportError(f"models[{i}].model {m.model!r} is listed twice")
        names.add(m.model)
        if not (0.0 <= m.kv_headroom <= 1.0):  # also false for NaN
            raise ReportError(f"models[{i}].kv_headroom must be within 0..1")
        for name in ("est_ttft_ms", "tokens_per_second", "gpu_tokens_per_second"):
            value = getattr(m, name)
            if not math.isfinite(value) or value < 0:
                raise ReportError(f"models[{i}].{name} must be a finite number >= 0")
        if m.saturated_pods > m.ready_pods:
            raise ReportError(f"models[{i}].saturated_pods exceeds ready_pods")


class _Servicer(capacity_pb2_grpc.CapacityServiceServicer):
    def __init__(self, owner: CapacityServer) -> None:
        self._owner = owner

    async def Report(
        self,
        request_iterator: AsyncIterator[capacity_pb2.CapacityReport],
        context: grpc.aio.ServicerContext,
    ) -> AsyncIterator[capacity_pb2.Directive]:
        owner = self._owner
        try:
            cluster_id = owner.auth.authenticate(context.invocation_metadata())
        except AuthError as exc:
            owner.metrics.reports.labels("unauthenticated").inc()
            log.warning("capacity: refused a stream from %s: %s", context.peer(), exc)
            await context.abort(grpc.StatusCode.UNAUTHENTICATED, str(exc))
            return
        stream = owner._claim(cluster_id)
        elsewhere = False
        if (
            stream is not None
            and owner.lease is not None
            and not await owner.lease.acquire(cluster_id, stream.stream_id)
        ):
            owner._active.pop(cluster_id, None)
            stream, elsewhere = None, True
        if stream is None:
            owner.metrics.reports.labels("second_stream").inc()
            owner.metrics.refused.labels(cluster_id, "second_stream").inc()
            where = "on another router replica" if elsewhere else "here"
            log.warning(
                "capacity: refused a second report stream for cluster %r from %s (one is active %s)",
                cluster_id,
                context.peer(),
                where,
            )
            await context.abort(
                grpc.StatusCode.ALREADY_EXISTS,
                f"cluster {cluster_id!r} already has an active report stream ({where}); this one is "
                f"refused (a standby takes over after {owner.cfg.stale_after_s:g}s of silence from the active one)",
            )
            return
        owner.metrics.streams.inc()
        log.info("capacity: agent for cluster %r connected from %s", cluster_id, context.peer())
        try:
            async for report in request_iterator:
                if owner._active.get(cluster_id) is not stream or (
                    owner.lease is not None and not await owner.lease.renew(cluster_id, stream.stream_id)
                ):
                    owner.metrics.reports.labels("replaced").inc()
                    await context.abort(
                        grpc.StatusCode.ABORTED,
                        f"this stream went silent and another one took over cluster {cluster_id!r}",
                    )
                    return
                stream.last_report_at = owner._clock()
                if report.cluster_id != cluster_id:
                    owner.metrics.reports.labels("forbidden").inc()
                    log.warning(
                        "capacity: agent of cluster %r tried to report for %r; stream closed",
                        cluster_id,
                        report.cluster_id,
                    )
                    await context.abort(
                        grpc.StatusCode.PERMISSION_DENIED,
                        f"this token may report only for cluster {cluster_id!r}",
                    )
                    return
                message = ""
                if report.sequence <= stream.last_seq:
                    owner.metrics.reports.labels("stale").inc()
                    message = f"sequence {report.sequence} ignored: not after {stream.last_seq}"
                else:
                    try:
                        validate_report(report)
                        owner.policy.check(cluster_id, report)
                    except PolicyRefusal as exc:
                        owner.metrics.reports.labels("refused").inc()
                        owner.metrics.refused.labels(cluster_id, exc.reason).inc()
                        message = f"report {report.sequence} refused: {exc}"
                        log.warning("capacity: cluster %r: %s", cluster_id, message)
                    except ReportError as exc:
                        owner.metrics.reports.labels("invalid").inc()
                        message = f"report {report.sequence} rejected: {exc}"
                        log.warning("capacity: cluster %r: %s", cluster_id, message)
                    else:
                        stream.last_seq = report.sequence
                        await owner.fleet.publish(state_from_report(report, time.time()))
                        owner.metrics.reports.labels("accepted").inc()
                yield capacity_pb2.Directive(
                    ack=capacity_pb2.Ack(sequence=stream.last_seq),
                    report_interval_ms=owner.cfg.report_interval_ms,
                    drain=owner.fleet.router_drained(cluster_id),
                    message=message,
                )
        finally:
            if owner._active.get(cluster_id) is stream:
                del owner._active[cluster_id]
                if owner.lease is not None:
                    await owner.lease.release(cluster_id, stream.stream_id)
            owner.metrics.streams.dec()
            log.info("capacity: agent for cluster %r disconnected", cluster_id)


@dataclass(slots=True, eq=False)
class _ActiveStream:
    """The one stream allowed to report for a cluster, and the cluster's sequence on it."""

    last_report_at: float
    last_seq: int = 0
    stream_id: str = field(default_factory=lambda: uuid.uuid4().hex)  # this stream's lease value


class CapacityServer:
    """grpc.aio server for CapacityService plus grpc.health.v1 on one port."""

    def __init__(
        self,
        cfg: CapacityServerConfig,
        fleet: ReportSink,
        *,
        registry: CollectorRegistry | None = None,
        clock: Callable[[], float] = time.monotonic,  # stream silence (tests inject one)
        lease: RedisStreamLease | None = None,  # one stream per cluster across replicas (Redis)
    ) -> None:
        self._clock = clock
        self.lease = lease
        self.cfg = cfg
        self.fleet = fleet
        self.metrics = CapacityMetrics(registry if registry is not None else CollectorRegistry())
        self.auth = AgentAuthenticator(cfg.agents)
        if (cfg.tls_cert_file is None) != (cfg.tls_key_file is None):
            raise ConfigError("capacity.tlsCertFile and capacity.tlsKeyFile must be set together")
        self._server: grpc.aio.Server | None = None
        self._health: health.aio.HealthServicer | None = None
        self.policy = ReportPolicy(cfg.agents, cfg.limits)
        self._active: dict[str, _ActiveStream] = {}
        self.port: int | None = None

    @property
    def tls(self) -> bool:
        return self.cfg.tls_cert_file is not None

    def connected_clusters(self) -> list[str]:
        """Clusters with an open report stream (one per cluster; HA replicas stand by)."""
        return sorted(self._active)

    def _claim(self, cluster_id: str) -> _ActiveStream | None:
        """Make a new stream the cluster's active one, or None while another is active.

        Refuse, not replace: a stolen token cannot kick the real agent off, and HA gateway replicas
        become active/standby reporters instead of interleaving. An active stream silent for
        `staleAfterS` (a half-open connection) is taken over, and it is closed at its next report.
        """
        now = self._clock()
        current = self._active.get(cluster_id)
        if current is not None and now - current.last_report_at < self.cfg.stale_after_s:
            return None
        stream = _ActiveStream(last_report_at=now)
        self._active[cluster_id] = stream
        return stream

    async def start(self) -> int:
        """Bind and serve; returns the bound port (config port 0 picks a free one)."""
        server = grpc.aio.server(options=[("grpc.so_reuseport", 0)])
        capacity_pb2_grpc.add_CapacityServiceServicer_to_server(_Servicer(self), server)
        health_servicer = health.aio.HealthServicer()
        health_pb2_grpc.add_HealthServicer_to_server(health_servicer, server)
        host = f"[{self.cfg.host}]" if ":" in self.cfg.host else self.cfg.host
        address = f"{host}:{self.cfg.port}"
        creds: grpc.ServerCredentials | None = None
        if self.cfg.tls_cert_file is not None and self.cfg.tls_key_file is not None:
            creds = server_credentials("capacity", self.cfg.tls_cert_file, self.cfg.tls_key_file)
        try:
            port = server.add_secure_port(address, creds) if creds else server.add_insecure_port(address)
        except RuntimeError:  # grpc reports a port in use (or a key/cert mismatch) this way
            raise ListenError.grpc(
                self.cfg.host, self.cfg.port, "capacity gRPC server", tls=creds is not None
            ) from None
        if port == 0:
            raise OSError(f"capacity server: cannot listen on {address}")
        await server.start()
        self.policy.add_own_address(self.cfg.host, port)
        for service in ("", SERVICE_NAME):
            await health_servicer.set(service, health_pb2.HealthCheckResponse.SERVING)
        self._server, self._health, self.port = server, health_servicer, port
        log.info(
            "capacity server listening on %s:%d (gRPC%s, %d agent token(s))",
            host,
            port,
            "+TLS" if self.tls else "",
            len(self.auth),
        )
        return port

    async def stop(self, grace: float = 1.0) -> None:
        server, self._server = self._server, None
        if server is None:
            return
        if self._health is not None:
            await self._health.enter_graceful_shutdown()
        await server.stop(grace)
        log.info("capacity server stopped")
