"""The cluster's capacity agent: streams reports of this gateway's pool to the global router.

One bidirectional stream at a time. A report goes out on connect, then every report interval (the
router's `report_interval_ms` directive overrides the configured one) and early when the pool
changes in a way Tier 2 acts on (a pod turns ready/stale, saturation flips, served models change,
the gateway's admission queue for a name forms, clears or crosses a level: `gateway_queue_level`),
checked every `check_interval_s`, at most one early report per `min_early_gap_s` (so a pod flapping
around a threshold costs at most 4 reports a second). A lost stream is reopened with exponential
backoff and jitter; a stream that stays silent (no directive) for several intervals counts as lost
(half-open TCP).
"""

from __future__ import annotations

import asyncio
import ipaddress
import logging
import re
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from urllib.parse import urlsplit

import grpc
from tenacity import (
    AsyncRetrying,
    RetryCallState,
    retry_if_exception_type,
    wait_exponential,
    wait_random,
)

from cluster_gateway.agent.aggregate import (
    SignificantState,
    build_report,
    default_saturation,
    gateway_url,
    significant_state,
)
from cluster_gateway.agent.service_model import ServiceModel, service_model
from cluster_gateway.pool import EndpointPool
from common.config.gateway import GatewaySpec, Saturation
from common.config.loader import ConfigError
from common.proto.fleetgate.v1 import capacity_pb2, capacity_pb2_grpc

log = logging.getLogger(__name__)

MIN_INTERVAL_S = 0.05
# host:port, [v6]:port, or a gRPC target with a resolver scheme
_ADDRESS_RE = re.compile(
    r"^(?:(?:dns|ipv4|ipv6|unix|unix-abstract|vsock|xds):.+|[^\s/:]+:\d{1,5}|\[[0-9a-fA-F:.]+\]:\d{1,5})$"
)
_UNSPECIFIED_HOSTS = ("0.0.0.0", "::", "")
_DENIED = (grpc.StatusCode.UNAUTHENTICATED, grpc.StatusCode.PERMISSION_DENIED)


class StreamLost(Exception):
    """The report stream ended; `established` says whether the router had acknowledged it."""

    def __init__(self, reason: str, *, established: bool, code: grpc.StatusCode | None = None) -> None:
        super().__init__(reason)
        self.established = established
        self.code = code


class CapacityAgent:
    """Runs until cancelled. `connected`, `drain_requested` and `last_directive` are for the gateway
    (status, readiness) and for tests.

    `gateway_url`, when given, supplies the URL Tier 2 should send traffic to (e.g. from the port the
    gateway actually bound); while it returns None the agent waits before connecting.
    `gateway_queued`, when given, reads the gateway's admission queue depth per requested model (a
    read-only view: the agent never calls into the proxy), counted in each report.
    """

    def __init__(
        self,
        spec: GatewaySpec,
        pool: EndpointPool,
        *,
        token: str,
        saturation: Saturation | None = None,
        service: ServiceModel | None = None,
        check_interval_s: float = 0.1,
        min_early_gap_s: float = 0.25,
        backoff_initial_s: float = 0.2,
        backoff_max_s: float = 5.0,
        silence_timeout_s: float | None = None,
        on_drain: Callable[[bool], None] | None = None,
        gateway_url: Callable[[], str | None] | None = None,
        gateway_queued: Callable[[], Mapping[str, int]] | None = None,
    ) -> None:
        if spec.global_router is None:
            raise ConfigError("globalRouter: must be set to run the capacity agent")
        if not token:
            raise ConfigError("globalRouter: the agent token is empty")
        if not _ADDRESS_RE.match(spec.global_router.address):
            raise ConfigError(
                f"globalRouter.address: expected host:port (or a gRPC target such as dns:///host:port), "
                f"got {spec.global_router.address!r}"
            )
        self.spec = spec
        self.link = spec.global_router
        self.pool = pool
        self.saturation = saturation if saturation is not None else default_saturation(spec)
        self.service = service if service is not None else service_model(spec)
        self.check_interval_s = check_interval_s
        self.min_early_gap_s = min_early_gap_s
        self.backoff_initial_s = backoff_initial_s
        self.backoff_max_s = backoff_max_s
        self._silence_timeout_s = silence_timeout_s
        self._on_drain = on_drain
        self._gateway_url = gateway_url
        self._gateway_queued = gateway_queued
        self._metadata = (("authorization", f"Bearer {token}"),)  # never logged
        self._root_certs = _read_ca(self.link.ca_file) if self.link.tls and self.link.ca_file else None
        self.interval_s = max(MIN_INTERVAL_S, self.link.report_interval_ms / 1000.0)
        self.connected = False
        self.drain_requested = False
        # the gateway is stopping (SIGTERM, docs/drain.md): reports say draining from the next one on
        self.draining = False
        self._drain_seq: int | None = None  # the first report that said so
        self.last_directive: capacity_pb2.Directive | None = None
        self.last_acked = 0
        self.reports_sent = 0
        self.early_reports = 0
        self.sessions = 0  # streams the router acknowledged
        self.last_error: str | None = None
        self._seq = 0  # monotonic for the agent's lifetime, hence per stream too
        self._last_signature: SignificantState | None = None
        self._last_directive_at = 0.0

    # --- public ------------------------------------------------------------------
    async def run(self) -> None:
        url = await self._wait_for_url()
        if urlsplit(url).hostname in _UNSPECIFIED_HOSTS:
            log.warning(
                "capacity agent: gateway URL %s is a wildcard address the router cannot reach; set publicUrl",
                url,
            )
        if not self.link.tls and not _is_loopback(self.link.address):
            log.warning(
                "capacity agent: globalRouter.tls is off, so the agent token crosses the network in clear"
            )
        log.info(
            "capacity agent for cluster %r reporting to %s (%s)",
            self.spec.cluster_id,
            self.link.address,
            "TLS" if self.link.tls else "plaintext",
        )
        try:
            while True:
                retrying = AsyncRetrying(
                    wait=wait_exponential(multiplier=self.backoff_initial_s, max=self.backoff_max_s)
                    + wait_random(0, self.backoff_initial_s),
                    retry=retry_if_exception_type(Exception),
                    before_sleep=self._before_sleep,
                    reraise=True,
                )
                async for attempt in retrying:
                    with attempt:
                        try:
                            await self._session()
                        except StreamLost as exc:
                            if not exc.established:
                                raise
                            # A stream that worked ends: reconnect at once, with a fresh backoff.
                            self._note_error(str(exc), exc.code)
        finally:
            self.connected = False

    def report_now(self) -> capacity_pb2.CapacityReport:
        """The next report (advances the sequence)."""
        self._seq += 1
        url = self._gateway_url() if self._gateway_url is not None else None
        queued = self._gateway_queued() if self._gateway_queued is not None else None
        report = build_report(
            self.spec,
            self.pool,
            self._seq,
            self.saturation,
            service=self.service,
            url=url,
            gateway_queued=queued,
        )
        if self.draining:
            report.draining = True
            if self._drain_seq is None:
                self._drain_seq = self._seq
        return report

    @property
    def drain_acknowledged(self) -> bool:
        """The router has acknowledged a report saying this cluster drains (it routes nothing new here)."""
        return self._drain_seq is not None and self.last_acked >= self._drain_seq

    async def _wait_for_url(self) -> str:
        if self._gateway_url is None:
            return gateway_url(self.spec)
        while True:  # the gateway has not bound its port yet; polled, as it has no event for that
            url = self._gateway_url()
            if url is not None:
                return url
            await asyncio.sleep(0.01)

    # --- one stream ------------------------------------------------------------------
    def _channel(self) -> grpc.aio.Channel:
        if not self.link.tls:
            return grpc.aio.insecure_channel(self.link.address)
        creds = grpc.ssl_channel_credentials(root_certificates=self._root_certs)
        return grpc.aio.secure_channel(self.link.address, creds)

    async def _session(self) -> None:
        async with self._channel() as channel:
            stub = capacity_pb2_grpc.CapacityServiceStub(channel)
            call = stub.Report(metadata=self._metadata)
            established = self.sessions
            reader = asyncio.create_task(self._read_loop(call), name="agent-read")
            writer = asyncio.create_task(self._write_loop(call), name="agent-write")
            try:
                await asyncio.wait({reader, writer}, return_when=asyncio.FIRST_COMPLETED)
                errors = [t.exception() for t in (reader, writer) if t.done() and not t.cancelled()]
                # the reader holds the router's status (e.g. UNAUTHENTICATED); prefer it
                exc = next((e for e in errors if isinstance(e, grpc.aio.AioRpcError)), None) or (
                    errors[0] if errors else None
                )
            finally:
                for t in (reader, writer):
                    t.cancel()
                # asyncio.wait, not `await t`: it neither raises the loops' errors nor swallows a
                # cancellation of run() itself
                await asyncio.wait({reader, writer})
                call.cancel()
                self.connected = False
            was_established = self.sessions > established
            if isinstance(exc, StreamLost):
                exc.established = was_established
                raise exc
            if isinstance(exc, grpc.aio.AioRpcError):
                raise StreamLost(
                    f"{exc.code().name}: {exc.details()}", established=was_established, code=exc.code()
                )
            if exc is not None and not isinstance(exc, asyncio.InvalidStateError):
                raise exc
            code = call.code() if call.done() else None
            status = await code if code is not None else None
            raise StreamLost(
                f"stream ended ({status.name if status else 'no status'})",
                established=was_established,
                code=status,
            )

    async def _read_loop(self, call: grpc.aio.StreamStreamCall) -> None:
        while True:
            directive = await call.read()
            if directive is grpc.aio.EOF:
                raise StreamLost("the router closed the stream", established=False)
            assert isinstance(directive, capacity_pb2.Directive)
            self._apply(directive)

    def _apply(self, d: capacity_pb2.Directive) -> None:
        self._last_directive_at = time.monotonic()
        if not self.connected:
            self.connected = True
            self.sessions += 1
            self.last_error = None
            log.info("capacity agent: connected to the global router at %s", self.link.address)
        self.last_directive = d
        if d.HasField("ack"):
            self.last_acked = max(self.last_acked, d.ack.sequence)
        if d.report_interval_ms > 0:
            interval = max(MIN_INTERVAL_S, d.report_interval_ms / 1000.0)
            if interval != self.interval_s:
                log.info("capacity agent: report interval set to %d ms by the router", d.report_interval_ms)
                self.interval_s = interval
        if d.drain != self.drain_requested:
            self.drain_requested = d.drain
            log.warning("capacity agent: the router %s this cluster", "drained" if d.drain else "undrained")
            if self._on_drain is not None:
                self._on_drain(d.drain)
        if d.message:
            log.warning("capacity agent: router says: %s", d.message)

    async def _write_loop(self, call: grpc.aio.StreamStreamCall) -> None:
        max_staleness_s = self.spec.scrape.max_staleness_ms / 1000.0
        await self._send(call, self._significant_state(max_staleness_s))
        sent_at = time.monotonic()
        self._last_directive_at = sent_at
        while True:
            await asyncio.sleep(self.check_interval_s)
            now = time.monotonic()
            silence = self._silence_timeout_s or max(5.0, 4 * self.interval_s)
            if now - self._last_directive_at > silence:
                raise StreamLost(f"no directive from the router for {silence:.1f}s", established=False)
            signature = self._significant_state(max_staleness_s, now)
            # a pod flapping around a threshold must not turn into a report every check
            changed = signature != self._last_signature and now - sent_at >= self.min_early_gap_s
            changed |= self.draining and self._drain_seq is None  # leaving rotation: say so at once
            if changed or now - sent_at >= self.interval_s:
                if changed and now - sent_at < self.interval_s:
                    self.early_reports += 1
                await self._send(call, signature)
                sent_at = now

    def _significant_state(self, max_staleness_s: float, now: float | None = None) -> SignificantState:
        queued = self._gateway_queued() if self._gateway_queued is not None else None
        return significant_state(self.pool, self.saturation, max_staleness_s, now, gateway_queued=queued)

    async def _send(self, call: grpc.aio.StreamStreamCall, signature: SignificantState) -> None:
        await call.write(self.report_now())
        self._last_signature = signature
        self.reports_sent += 1

    # --- logging ------------------------------------------------------------------------
    def _note_error(self, message: str, code: grpc.StatusCode | None) -> None:
        """One log line per distinct problem, not one per retry during an outage."""
        repeated = message == self.last_error
        self.last_error = message
        if code in _DENIED:
            level = logging.DEBUG if repeated else logging.ERROR
            log.log(
                level,
                "capacity agent: the router refused this agent (%s); check token and clusterId",
                message,
            )
        else:
            log.log(
                logging.DEBUG if repeated else logging.WARNING,
                "capacity agent: stream to %s lost: %s",
                self.link.address,
                message,
            )

    def _before_sleep(self, state: RetryCallState) -> None:
        exc = state.outcome.exception() if state.outcome is not None else None
        code = exc.code if isinstance(exc, StreamLost) else None
        self._note_error(str(exc) if exc else "unknown error", code)
        wait = state.next_action.sleep if state.next_action is not None else 0.0
        log.debug("capacity agent: reconnecting in %.2fs (attempt %d)", wait, state.attempt_number)


def _is_loopback(address: str) -> bool:
    host = address.rsplit(":", 1)[0].strip("[]") if ":" in address else address
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def _read_ca(path: str) -> bytes:
    try:
        return Path(path).read_bytes()
    except OSError as exc:
        raise ConfigError(f"globalRouter.caFile: cannot read {path}: {exc.strerror}") from None
