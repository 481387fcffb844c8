"""Envoy's gRPC access log, read by the picker: how each request Envoy routed to a pod ended.

Neither picker sees the end of a request on its hot path any more: the ext_proc picker skips the
response phase (a message pair per request), and the ext_authz check is one HTTP exchange before
the request is sent. Envoy's access logger (`envoy.access_loggers.http_grpc`) streams the entries
in batches (`extProc.accessLogFlushMs`) on one long-lived gRPC stream per Envoy worker thread, so
the outcomes cost the picker a few protobuf fields per request and no round trip:

  * the upstream host and the status (with Envoy's response flags) feed the outlier detector
    exactly as the embedded proxy's own responses do: 5xx → failure (502/503/504 and connection
    failures, resets, timeouts count as the gateway's kind), 429 → shed, else success. So a pod that
    fails fast is ejected in Envoy mode too, at most one flush interval late;
  * `x-fleetgate-pick` (ext_authz picks) releases the pod's in-flight slot (extauthz/release.py).

With `extProc.envoyTokenSha256` set, a stream without Envoy's token in its metadata is refused:
forged entries could otherwise eject healthy pods.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Callable
from typing import Any

import grpc
from envoy.data.accesslog.v3 import accesslog_pb2
from envoy.service.accesslog.v3 import als_pb2, als_pb2_grpc

from cluster_gateway.extproc.envoy_token import ENVOY_TOKEN_HEADER, EnvoyToken
from cluster_gateway.pool import EndpointPool, PodState
from cluster_gateway.request_path.outliers import OutlierDetector

log = logging.getLogger("fleetgate.gateway.accesslog")

PICK_HEADER = "x-fleetgate-pick"  # the ext_authz pick's id (extauthz/ledger.py), logged by Envoy
_GATEWAY_STATUSES = frozenset({502, 503, 504})


def _gateway_kind(flags: accesslog_pb2.ResponseFlags) -> bool:
    """Envoy could not get an answer from the pod (vs. the pod answering 5xx itself)."""
    return (
        flags.upstream_connection_failure
        or flags.upstream_remote_reset
        or flags.upstream_connection_termination
        or flags.upstream_request_timeout
        or flags.upstream_protocol_error
    )


class OutcomeFeed:
    """Applies access-log entries to the pool's outlier detector and the ext_authz releases."""

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

    def apply(self, entry: accesslog_pb2.HTTPAccessLogEntry) -> None:
        status = entry.response.response_code.value if entry.response.HasField("response_code") else 0
        if self.release is not None:
            pick_id = entry.request.request_headers.get(PICK_HEADER)
            if pick_id:
                self.release(pick_id, status)
        if not self.outcomes:
            return
        common = entry.common_properties
        sock = common.upstream_remote_address.socket_address
        if not sock.address:
            return  # never reached a pod (refused by the picker, no route): nothing to learn
        pod = self._pod(f"{sock.address}:{sock.port_value}")
        if pod is None:
            return
        gateway = _gateway_kind(common.response_flags)
        if gateway or status >= 500:
            self.outliers.failure(pod, gateway=gateway or status in _GATEWAY_STATUSES)
        elif status == 429:  # overloaded, not broken: demoted, never ejected
            self.outliers.shed(pod)
        elif status:
            self.outliers.success(pod)


class AccessLogService(als_pb2_grpc.AccessLogServiceServicer):
    def __init__(self, feed: OutcomeFeed, token: EnvoyToken) -> None:
        self.feed = feed
        self.token = token

    async def StreamAccessLogs(
        self,
        request_iterator: AsyncIterator[als_pb2.StreamAccessLogsMessage],
        context: grpc.aio.ServicerContext,
    ) -> als_pb2.StreamAccessLogsResponse:
        if self.token.required:
            presented = next(
                (v for k, v in context.invocation_metadata() or () if k == ENVOY_TOKEN_HEADER), None
            )
            if not self.token.accepts(presented):
                await context.abort(
                    grpc.StatusCode.UNAUTHENTICATED, "access log stream without Envoy's token"
                )
        apply = self.feed.apply
        async for message in request_iterator:
            for entry in message.http_logs.log_entry:
                try:
                    apply(entry)
                except Exception:  # one odd entry must not end Envoy's log stream
                    log.exception("access log entry not applied")
        return als_pb2.StreamAccessLogsResponse()


def access_logger(
    *,
    cluster: str,
    flush_ms: int,
    envoy_token: str | None = None,
    picks: bool = False,
) -> dict[str, Any]:
    """The HCM `access_log` entry that streams to the picker's gRPC cluster. `picks`: log the
    ext_authz pick id too (the ext_authz bootstrap)."""
    grpc_service: dict[str, Any] = {"envoy_grpc": {"cluster_name": cluster}}
    if envoy_token is not None:
        grpc_service["initial_metadata"] = [{"key": ENVOY_TOKEN_HEADER, "value": envoy_token}]
    config: dict[str, Any] = {
        "@type": "type.googleapis.com/envoy.extensions.access_loggers.grpc.v3.HttpGrpcAccessLogConfig",
        "common_config": {
            "log_name": "fleetgate-picker",
            "transport_api_version": "V3",
            "grpc_service": grpc_service,
            "buffer_flush_interval": f"{flush_ms / 1000:.3f}s",
            "buffer_size_bytes": 16384,
        },
    }
    if picks:
        config["additional_request_headers_to_log"] = [PICK_HEADER]
    return {"name": "envoy.access_loggers.http_grpc", "typed_config": config}
