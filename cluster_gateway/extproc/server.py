"""Envoy ext_proc endpoint picker (Gateway API Inference Extension conventions).

Per HTTP request Envoy opens one `ExternalProcessor.Process` stream. The picker reads the request
headers and the whole body, schedules, and answers with `x-gateway-destination-endpoint: ip:port`
as a header mutation and the ranked list in dynamic metadata under `envoy.lb`, which an
ORIGINAL_DST cluster (`use_http_header`) or the override_host policy routes on. Body modes:
  * STREAMED with `send_body_without_waiting_for_header_response` (`envoy_front/bootstrap.py`'s
    default): the body follows the headers without waiting; the headers answer carries the pick and
    each body chunk gets a bare CONTINUE, since Envoy kept the bytes (four small messages, one round
    trip);
  * FULL_DUPLEX_STREAMED (Inference Extension's convention): Envoy keeps no copy of the body, so it
    is streamed back unchanged after the headers answer;
  * BUFFERED: the headers are acknowledged first, the pick rides on the body answer (two round trips).
The pod's in-flight slot is held until the response ends or the stream closes, whichever comes
first: Envoy closes the stream when the HTTP request is destroyed (its whole response sent), so with
the response phase skipped (`response_header_mode: SKIP`) the close alone releases the slot, exactly,
and no response-path message is paid for. When Envoy does send the response headers, their status
feeds outlier detection and the outcome metric.
"""

from __future__ import annotations

import logging
import time
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass, field

import grpc
from envoy.extensions.filters.http.ext_proc.v3 import processing_mode_pb2
from envoy.service.ext_proc.v3 import external_processor_pb2 as pb
from envoy.service.ext_proc.v3 import external_processor_pb2_grpc as pb_grpc
from grpc_health.v1 import health, health_pb2, health_pb2_grpc
from opentelemetry.proto.collector.logs.v1 import logs_service_pb2_grpc

from cluster_gateway.auth import GatewayAuthenticator
from cluster_gateway.extproc import messages as msg
from cluster_gateway.observability import CANCELLED, OK, REJECTED, SHED, UPSTREAM_ERROR, GatewayMetrics
from cluster_gateway.pool import EndpointPool, PodState
from cluster_gateway.request_path.dispatch import Dispatcher, Pick
from cluster_gateway.request_path.headers import DESTINATION_HEADER, is_internal
from cluster_gateway.request_path.models_list import models_listing
from cluster_gateway.request_path.outliers import OutlierDetector
from common.config.gateway import ExtProc, GatewayAuth, OutlierDetection
from common.errors import OpenAIError, bad_request
from common.listen_error import ListenError
from common.openai_request import CHAT_PATH, COMPLETIONS_PATH, MAX_JSON_DEPTH, parse_request

log = logging.getLogger("fleetgate.gateway.extproc")

_FULL_DUPLEX = processing_mode_pb2.ProcessingMode.FULL_DUPLEX_STREAMED
_BUFFERED = processing_mode_pb2.ProcessingMode.BUFFERED
_STREAMED = processing_mode_pb2.ProcessingMode.STREAMED
_INFERENCE_PATHS = frozenset({COMPLETIONS_PATH, CHAT_PATH})


@dataclass(slots=True)
class _Stream:
    """What one ext_proc stream has seen so far."""

    headers: dict[str, str] = field(default_factory=dict)
    body_mode: int = _FULL_DUPLEX
    body: list[bytes] = field(default_factory=list)
    body_size: int = 0
    chunks: int = 0  # body messages received (STREAMED answers each with a CONTINUE)
    picked: bool = False
    pick: Pick | None = None
    pod: PodState | None = None
    dispatched_at: float = 0.0
    status: int = 0
    released: bool = False

    @property
    def path(self) -> str:
        return self.headers.get(":path", "").split("?", 1)[0]


class PickerService(pb_grpc.ExternalProcessorServicer):
    def __init__(
        self,
        pool: EndpointPool,
        dispatcher: Dispatcher,
        metrics: GatewayMetrics,
        cfg: ExtProc,
        *,
        max_body_bytes: int,
        max_json_depth: int = MAX_JSON_DEPTH,
        outliers: OutlierDetector | None = None,
        auth: GatewayAuthenticator | None = None,
    ) -> None:
        self.auth = auth if auth is not None else GatewayAuthenticator(GatewayAuth())  # default: open
        self.pool = pool
        self.dispatcher = dispatcher
        self.metrics = metrics
        self.fallbacks = cfg.fallback_endpoints
        self.max_body = max_body_bytes
        self.max_depth = max_json_depth
        # outcomes seen in the response headers feed the gateway's outlier detection
        self.outliers = outliers or OutlierDetector(pool, OutlierDetection())
        # a stream that closes without response headers: cancelled when Envoy was asked to send
        # them (the client left first), ok when the response phase is skipped (the close is the end)
        self.closed_outcome = CANCELLED if cfg.response_headers else OK

    async def Process(
        self, request_iterator: AsyncIterator[pb.ProcessingRequest], context: grpc.aio.ServicerContext
    ) -> AsyncIterator[pb.ProcessingResponse]:
        st = _Stream()
        try:
            async for req in request_iterator:
                for resp in await self._handle(st, req):
                    yield resp
        finally:
            self._release(st, self.closed_outcome if st.status == 0 and st.pod is not None else None)

    async def _handle(self, st: _Stream, req: pb.ProcessingRequest) -> list[pb.ProcessingResponse]:
        kind = req.WhichOneof("request")
        if kind == "request_headers":
            return await self._on_request_headers(st, req)
        if kind == "request_body":
            return await self._on_request_body(st, req.request_body)
        if kind == "request_trailers":
            out = [] if st.picked else await self._finish_request(st)
            return [*out, msg.trailers_response(response_phase=False)]
        if kind == "response_headers":
            return self._on_response_headers(st, req.response_headers)
        if kind == "response_body":
            return self._on_response_body(st, req.response_body)
        if kind == "response_trailers":
            self._release(st, None)
            return [msg.trailers_response(response_phase=True)]
        return []

    # --- request phase ---------------------------------------------------
    async def _on_request_headers(
        self, st: _Stream, req: pb.ProcessingRequest
    ) -> list[pb.ProcessingResponse]:
        st.headers = msg.header_map(req.request_headers)
        ahead = False
        if req.HasField("protocol_config"):
            st.body_mode = req.protocol_config.request_body_mode
            ahead = req.protocol_config.send_body_without_waiting_for_header_response
        method = st.headers.get(":method", "GET")
        if st.path not in _INFERENCE_PATHS or method != "POST":
            st.picked = True
            return [self._non_inference(st, method)]
        if req.request_headers.end_of_stream:
            st.picked = True
            return [msg.immediate_error(bad_request("Request body is required"))]
        if st.body_mode == _BUFFERED:
            # Envoy waits for this answer before sending the body; the mutation comes later
            return [msg.headers_response(remove=self._internal_headers(st))]
        if st.body_mode == _STREAMED and not ahead:
            # Envoy would hold the body until the headers answer, which needs the body: deadlock
            st.picked = True
            err = OpenAIError(
                500,
                "ext_proc STREAMED body mode needs send_body_without_waiting_for_header_response",
                type="server_error",
                code="extproc_misconfigured",
            )
            return [msg.immediate_error(err)]
        return []  # the headers answer waits for the body (it carries the destination)

    async def _on_request_body(self, st: _Stream, body: pb.HttpBody) -> list[pb.ProcessingResponse]:
        if st.picked:  # already answered (e.g. an immediate response); nothing more to do
            return []
        st.body.append(body.body)
        st.body_size += len(body.body)
        st.chunks += 1
        if st.body_size > self.max_body:
            st.picked = True
            err = OpenAIError(413, f"Request body exceeds {self.max_body} bytes", code="request_too_large")
            self.metrics.request_done("-", "-", REJECTED)
            return [msg.immediate_error(err)]
        if not body.end_of_stream:
            return []
        return await self._finish_request(st)

    async def _finish_request(self, st: _Stream) -> list[pb.ProcessingResponse]:
        st.picked = True
        raw = b"".join(st.body)
        try:
            self.auth.verify("POST", st.path, st.headers, raw)  # before the pick: 401 ImmediateResponse
            parsed = parse_request(raw, st.path, self.max_depth)
            sched_headers = {
                k: v for k, v in st.headers.items() if not k.startswith(":") and not is_internal(k)
            }
            pick = await self.dispatcher.pick_in_trace(parsed, sched_headers)
        except OpenAIError as err:
            self.metrics.request_done("-", "-", SHED if err.status == 429 else REJECTED)
            return [msg.immediate_error(err)]
        ranked = self.outliers.rank(pick.pods)
        pod = ranked[0]
        st.pick, st.pod = pick, pod
        self.dispatcher.dispatched(pick, pod)
        st.dispatched_at = time.monotonic()
        # The header names one endpoint: Envoy's ORIGINAL_DST cluster cannot parse a list (it
        # answers 503 "no healthy upstream"). The `envoy.lb` metadata carries the pick plus the
        # ranked fallbacks (`ip:port,ip:port`) for LB policies that fail over (override_host).
        endpoints = ",".join(p.endpoint.hostport for p in ranked[: 1 + self.fallbacks])
        set_headers = {DESTINATION_HEADER: pod.endpoint.hostport}
        remove = [h for h in self._internal_headers(st) if h != DESTINATION_HEADER]
        md = msg.destination_metadata(endpoints)
        if st.body_mode == _BUFFERED:
            return [msg.buffered_body_response(set_headers, remove, md)]
        if st.body_mode == _STREAMED:  # Envoy queued the chunks: let each through unchanged
            return [msg.headers_response(set_headers, remove, md), *msg.continue_bodies(st.chunks)]
        return [msg.headers_response(set_headers, remove, md), *msg.streamed_body(raw)]

    def _internal_headers(self, st: _Stream) -> list[str]:
        return [k for k in st.headers if is_internal(k)]

    def _non_inference(self, st: _Stream, method: str) -> pb.ProcessingResponse:
        """Answer what the pool itself knows; the picker never routes non-inference paths blindly."""
        if st.path == "/v1/models" and method == "GET":
            try:
                self.auth.verify(method, st.path, st.headers, b"")
            except OpenAIError as refused:
                return msg.immediate_error(refused)
            return msg.immediate(200, models_listing(self.pool))
        err = OpenAIError(
            404, f"Unknown path {method} {st.path}", code="unknown_url", type="invalid_request_error"
        )
        return msg.immediate_error(err)

    # --- response phase --------------------------------------------------
    def _on_response_headers(self, st: _Stream, headers: pb.HttpHeaders) -> list[pb.ProcessingResponse]:
        status = msg.header_map(headers).get(":status", "0")
        st.status = int(status) if status.isdigit() else 0
        if st.pod is not None:  # Envoy's own 503 (connect failure) counts against the pod too
            if st.status >= 500:
                self.outliers.failure(st.pod, gateway=st.status in (502, 503, 504))
            elif st.status == 429:  # overloaded, not broken: demoted, never ejected
                self.outliers.shed(st.pod)
            elif st.status:
                self.outliers.success(st.pod)
        if st.pod is not None and st.dispatched_at:
            self.metrics.ttft.labels(st.pod.name).observe(time.monotonic() - st.dispatched_at)
        if headers.end_of_stream:
            self._release(st, None)
        return [msg.headers_response(response_phase=True)]

    def _on_response_body(self, st: _Stream, body: pb.HttpBody) -> list[pb.ProcessingResponse]:
        # Only reached if Envoy is configured to send response bodies; echo them in full duplex.
        if body.end_of_stream:
            self._release(st, None)
        if st.body_mode == _FULL_DUPLEX:
            return list(_echo(body))
        return [msg.continue_body(response_phase=True)]

    def _release(self, st: _Stream, outcome: str | None) -> None:
        if st.released or st.pod is None or st.pick is None:
            return
        st.released = True
        self.dispatcher.finished(st.pod)
        if outcome is None:
            outcome = OK if 0 < st.status < 400 else UPSTREAM_ERROR if st.status else CANCELLED
        self.dispatcher.completed(st.pick, st.pod, outcome)
        self.metrics.request_done(st.pod.name, st.pick.profile, outcome)


def _echo(body: pb.HttpBody) -> Iterator[pb.ProcessingResponse]:
    sb = pb.StreamedBodyResponse(body=body.body, end_of_stream=body.end_of_stream)
    br = pb.BodyResponse(response=pb.CommonResponse(body_mutation=pb.BodyMutation(streamed_response=sb)))
    yield pb.ProcessingResponse(response_body=br)


# gRPC core queues new RPCs until the Python server asks for them; past 1,000 queued it starts
# refusing them at random (3,000: all), which Envoy reports as `ext_proc_error_gRPC_error_1
# {CANCELLED}`. Each ext_proc stream is one HTTP request, so a burst of 2,000 new streams hit it.
# The queue is bounded by Envoy's circuit breakers (`extProc.circuitBreakers`) instead.
PENDING_LIMITS = (
    ("grpc.server.max_pending_requests", 1_000_000),
    ("grpc.server.max_pending_requests_hard_limit", 1_000_000),
)


class ExtProcServer:
    """A grpc.aio server hosting the picker and the standard gRPC health service."""

    def __init__(
        self,
        service: PickerService,
        credentials: grpc.ServerCredentials | None = None,
        *,
        reuse_port: bool = False,
        access_log: logs_service_pb2_grpc.LogsServiceServicer | None = None,
    ) -> None:
        self.service = service
        self.access_log = access_log  # Envoy's access log (access_log.py), on the same port
        self.reuse_port = reuse_port  # gateway workers share the port (SO_REUSEPORT)
        self.credentials = credentials  # TLS when set (envoy_front/tls.py builds it from extProc.tls*)
        self._server: grpc.aio.Server | None = None
        self.port = 0

    async def start(self, host: str, port: int) -> int:
        server = grpc.aio.server(
            options=[("grpc.so_reuseport", 1 if self.reuse_port else 0), *PENDING_LIMITS]
        )
        pb_grpc.add_ExternalProcessorServicer_to_server(self.service, server)
        if self.access_log is not None:
            logs_service_pb2_grpc.add_LogsServiceServicer_to_server(self.access_log, server)
        hs = health.aio.HealthServicer()
        health_pb2_grpc.add_HealthServicer_to_server(hs, server)
        address = f"{host}:{port}"
        creds = self.credentials
        try:
            self.port = server.add_secure_port(address, creds) if creds else server.add_insecure_port(address)
        except RuntimeError:
            raise ListenError.grpc(host, port, "ext_proc gRPC server", tls=creds is not None) from None
        if self.port == 0:
            raise OSError(f"cannot bind the ext_proc server to {host}:{port}")
        await server.start()
        await hs.set("", health_pb2.HealthCheckResponse.SERVING)
        self._server = server
        return self.port

    async def stop(self, grace: float = 2.0) -> None:
        if self._server is not None:
            await self._server.stop(grace)
            self._server = None
