"""Envoy's access log, read by the picker: how each request Envoy routed to a pod ended.

Neither picker sees the end of a request on its hot path any more: the ext_proc picker skips the
response phase (a message pair per request), and the ext_authz check is one HTTP exchange before
the request is sent. Envoy's OpenTelemetry access logger (`envoy.access_loggers.open_telemetry`)
sends the ends in batches (every 50 ms: `envoy_bootstrap(access_log_flush_ms=...)`) as OTLP
`Export` calls on the picker's gRPC port. Each record is one short line that Envoy formats
(`LINE_FORMAT`), where Envoy's gRPC access log service (`envoy.access_loggers.http_grpc`, used
before) sent an `HTTPAccessLogEntry` of some thirty fields per request: reading the line costs the
gateway 7% less CPU per request through Envoy + ext_authz (bench/RESULTS.md):

  * the upstream host and the status (with Envoy's response flags) feed the outlier detector
    exactly as the embedded proxy's own responses do: 5xx → failure (502/503/504 and connection
    failures, resets, timeouts count as the gateway's kind), 429 → shed, else success. So a pod that
    fails fast is ejected in Envoy mode too, at most one flush interval late;
  * `x-fleetgate-pick` (ext_authz picks) releases the pod's in-flight slot (extauthz/release.py).

With `extProc.envoyTokenSha256` set, a call without Envoy's token in its metadata is refused:
forged records could otherwise eject healthy pods.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

import grpc
from opentelemetry.proto.collector.logs.v1 import logs_service_pb2, logs_service_pb2_grpc

from cluster_gateway.envoy_front.contract import PICK_HEADER
from cluster_gateway.envoy_front.token import ENVOY_TOKEN_HEADER, EnvoyToken
from cluster_gateway.pool import EndpointPool, PodState
from cluster_gateway.request_path.outliers import OutlierDetector

log = logging.getLogger("fleetgate.gateway.accesslog")

# status, response flags ("-" or e.g. "UF,URX"), pod ("-" when none was reached), pick id. Envoy
# makes the first three (no spaces in any); the pick id comes from a request header, so it is last
# and read as the rest of the line: a forged header with spaces cannot shift the other fields.
LINE_FORMAT = "%RESPONSE_CODE% %RESPONSE_FLAGS% %UPSTREAM_HOST% {pick}"
NO_PICK = "-"  # what Envoy writes for an absent header, and the line's last field without picks
_GATEWAY_STATUSES = frozenset({502, 503, 504})
# Envoy could not get an answer from the pod (vs. the pod answering 5xx itself): connection
# failure, remote reset, connection termination, upstream timeout, protocol error
_GATEWAY_FLAGS = frozenset({"UF", "UR", "UC", "UT", "UPE"})


class OutcomeFeed:
    """Applies access-log lines to the pool's outlier detector and the ext_authz releases."""

    def __init__(
        self,
        pool: EndpointPool,
        outliers: OutlierDetector,
        release: Callable[[str, int], None] | None = None,
        *,
        outcomes: bool = True,
    ) -> None:
        self.pool = pool
        self.outliers = outliers
        self.release = release
        self.outcomes = outcomes  # off when the ext_proc picker reads response headers itself
        self._by_address: dict[str, PodState] = {}
        self._version = -1

    def _pod(self, address: str) -> PodState | None:
        if self._version != self.pool.version:
            self._by_address = {p.endpoint.hostport: p for p in self.pool.pods()}
            self._version = self.pool.version
        return self._by_address.get(address)

    def apply(self, line: str) -> None:
        """One `LINE_FORMAT` line; ValueError when it is not one."""
        code, flags, host, pick = line.split(" ", 3)
        status = int(code)  # 0: no response (the client left, or Envoy never got one)
        if self.release is not None and pick != NO_PICK:
            self.release(pick, status)
        if not self.outcomes or host == "-":
            return  # never reached a pod (refused by the picker, no route): nothing to learn
        pod = self._pod(host)
        if pod is None:
            return
        gateway = flags != "-" and not _GATEWAY_FLAGS.isdisjoint(flags.split(","))
        if gateway or status >= 500:
            self.outliers.failure(pod, gateway=gateway or status in _GATEWAY_STATUSES)
        elif status == 429:  # overloaded, not broken: demoted, never ejected
            self.outliers.shed(pod)
        elif status:
            self.outliers.success(pod)


class AccessLogService(logs_service_pb2_grpc.LogsServiceServicer):
    """The OTLP logs service Envoy's access logger calls: one `Export` per flushed batch."""

    def __init__(self, feed: OutcomeFeed, token: EnvoyToken) -> None:
        self.feed = feed
        self.token = token

    async def Export(
        self, request: logs_service_pb2.ExportLogsServiceRequest, context: grpc.aio.ServicerContext
    ) -> logs_service_pb2.ExportLogsServiceResponse:
        if self.token.required:
            presented = next(
                (v for k, v in context.invocation_metadata() or () if k == ENVOY_TOKEN_HEADER), None
            )
            if not self.token.accepts(presented):
                await context.abort(grpc.StatusCode.UNAUTHENTICATED, "access log without Envoy's token")
        apply = self.feed.apply
        bad = 0
        for resource in request.resource_logs:
            for scope in resource.scope_logs:
                for record in scope.log_records:
                    try:
                        apply(record.body.string_value)
                    except Exception:  # one odd record must not cost the rest of the batch
                        bad += 1
        if bad:
            log.warning("%d access log record(s) not applied (not %r lines)", bad, LINE_FORMAT)
        return logs_service_pb2.ExportLogsServiceResponse()


def access_logger(
    *,
    cluster: str,
    flush_ms: int,
    envoy_token: str | None = None,
    picks: bool = False,
) -> dict[str, Any]:
    """The HCM `access_log` entry that sends each request's `LINE_FORMAT` line to the picker's gRPC
    cluster. `picks`: the line ends with the ext_authz pick id (the ext_authz bootstrap)."""
    grpc_service: dict[str, Any] = {"envoy_grpc": {"cluster_name": cluster}}
    if envoy_token is not None:
        grpc_service["initial_metadata"] = [{"key": ENVOY_TOKEN_HEADER, "value": envoy_token}]
    line = LINE_FORMAT.format(pick=f"%REQ({PICK_HEADER})%" if picks else NO_PICK)
    config: dict[str, Any] = {
        "@type": "type.googleapis.com/envoy.extensions.access_loggers.open_telemetry.v3.OpenTelemetryAccessLogConfig",
        # top-level fields: Envoy 1.40 warns that `common_config`, which held them before, is deprecated
        "log_name": "fleetgate-picker",
        "grpc_service": grpc_service,
        "buffer_flush_interval": f"{flush_ms / 1000:.3f}s",
        "buffer_size_bytes": 16384,
        "disable_builtin_labels": True,  # the node, zone and cluster names: nothing the picker reads
        "body": {"string_value": line},
    }
    return {"name": "envoy.access_loggers.open_telemetry", "typed_config": config}
