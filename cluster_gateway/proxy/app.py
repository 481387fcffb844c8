"""The embedded proxy: a lean ASGI app (served by uvicorn) in front of the pool.

A hand-rolled ASGI app instead of a framework because the hot path is one route that streams
bytes: routing is a dict lookup, the body is read once with a size cap, and client disconnects
are observed directly so the pod's request is cancelled and its in-flight slot released at once.
(`bench/proxy_overhead.py` measures the added latency.)
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from typing import Any

import msgspec

from cluster_gateway.auth import GatewayAuthenticator
from cluster_gateway.observability import CANCELLED, OK, REJECTED, SHED, GatewayMetrics
from cluster_gateway.pool import EndpointPool
from cluster_gateway.proxy.forward import Forwarder, NoPodAnswered, StreamBroken
from cluster_gateway.request_path.dispatch import Dispatcher
from cluster_gateway.request_path.headers import client_headers, upstream_request_headers
from cluster_gateway.request_path.models_list import models_listing
from cluster_gateway.request_path.readiness import readiness
from cluster_gateway.request_path.status_page import render_pods
from common.asgi import ClientGone, ResponseAborted, read_body, run_until_disconnect
from common.config.gateway import GatewayAuth, Proxy
from common.errors import OpenAIError
from common.genai_metrics import TAIL_BYTES, operation_name, usage_from_tail
from common.http import ASGIApp, Message, Receive, Scope, Send, send_body, send_error, send_json
from common.openai_request import CHAT_PATH, COMPLETIONS_PATH, ParsedRequest, parse_request
from common.request_log import REQUEST_ID_HEADER, RequestRecord, request_id, with_request_id
from common.response_stream import Observed, StreamBody
from common.telemetry import in_client_trace

log = logging.getLogger("fleetgate.gateway.proxy")

_RID = REQUEST_ID_HEADER.encode()


def _header(scope: Scope, name: bytes) -> str | None:
    for k, v in scope["headers"]:
        if k == name:
            return str(v.decode("latin-1"))
    return None


@dataclass(slots=True)
class _RequestState:
    profile: str = "-"
    counted: bool = False  # the forwarder took over outcome accounting
    done: bool = False  # the last response byte was handed to the server
    tail: bytes = b""  # the last two body chunks sent: the usage object is in them (no parsing here)
    prev: bytes = b""


class ProxyApp:
    """ASGI callable: `/v1/completions`, `/v1/chat/completions`, `/v1/models`, `/health`, `/ready`, `/metrics`."""

    def __init__(
        self,
        pool: EndpointPool,
        dispatcher: Dispatcher,
        forwarder: Forwarder,
        metrics: GatewayMetrics,
        cfg: Proxy,
        *,
        worker: int = 0,
        access_log: bool = True,
        auth: GatewayAuthenticator | None = None,
        extra_routes: dict[tuple[str, str], ASGIApp] | None = None,
        prefix_route: tuple[str, ASGIApp] | None = None,
    ) -> None:
        self.auth = auth if auth is not None else GatewayAuthenticator(GatewayAuth())  # default: open
        self.pool = pool
        self._health_body = msgspec.json.encode({"status": "ok", "worker": worker})
        self.dispatcher = dispatcher
        self.forwarder = forwarder
        self.metrics = metrics
        self.max_body = cfg.max_body_bytes
        self.max_depth = cfg.max_json_depth
        self.access_log = access_log
        self.draining = False  # set on SIGTERM (docs/drain.md): /ready says 503 while requests finish
        self.routes: dict[tuple[str, str], ASGIApp] = {
            ("POST", COMPLETIONS_PATH): self._completion,
            ("POST", CHAT_PATH): self._completion,
            ("GET", "/v1/models"): self._models,
            ("GET", "/health"): self._health,
            ("GET", "/ready"): self._ready,
            ("GET", "/metrics"): self._metrics,
            ("GET", "/"): self._status_page,
        }
        self.routes.update(extra_routes or {})  # e.g. Envoy's ext_authz check (extauthz/check.py)
        self._bare = set((extra_routes or {}).values())  # answer without a request id of ours
        self._prefix_route = prefix_route  # ...and every other path under its prefix (its own 404)
        self._paths = {p for _, p in self.routes}

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "lifespan":
            await self._lifespan(receive, send)
            return
        if scope["type"] != "http":
            return
        handler = self.routes.get((scope["method"], scope["path"]))
        if handler == self._completion or handler in self._bare:  # bound methods: equal, never identical
            await handler(scope, receive, send)
            return
        send = with_request_id(send, request_id(_header(scope, _RID)))
        if handler is None and self._prefix_route and scope["path"].startswith(self._prefix_route[0]):
            handler = self._prefix_route[1]
        if handler is not None:
            await handler(scope, receive, send)
        elif scope["path"] in self._paths:
            await send_error(
                send, OpenAIError(405, f"Method {scope['method']} not allowed on {scope['path']}")
            )
        else:
            await send_error(
                send,
                OpenAIError(
                    404, f"Unknown path {scope['path']}", code="unknown_url", type="invalid_request_error"
                ),
            )

    async def _lifespan(self, receive: Receive, send: Send) -> None:
        while True:
            msg = await receive()
            if msg["type"] == "lifespan.startup":
                await send({"type": "lifespan.startup.complete"})
            elif msg["type"] == "lifespan.shutdown":
                await send({"type": "lifespan.shutdown.complete"})
                return

    # --- the data path ---------------------------------------------------
    async def _completion(self, scope: Scope, receive: Receive, send: Send) -> None:
        path: str = scope["path"]
        state = _RequestState()
        headers = client_headers(scope["headers"])
        rid = request_id(headers.get(REQUEST_ID_HEADER))
        headers[REQUEST_ID_HEADER] = rid  # the pod gets the same id (vLLM logs and echoes it)
        rec = RequestRecord(rid, path)
        send = with_request_id(send, rid)
        try:
            body = await read_body(receive, headers.get("content-length"), self.max_body)
            self.auth.verify_asgi("POST", path, scope["headers"], body)  # 401 unless router/key (auth.*)
            parsed = parse_request(body, path, self.max_depth)
            rec.model, rec.stream = parsed.model, parsed.stream
            await self._serve_until_disconnect(state, parsed, headers, path, body, scope, receive, send, rec)
        except ClientGone:
            rec.outcome = CANCELLED
            if not state.counted:
                self.metrics.request_done("-", state.profile, CANCELLED)
        except StreamBroken:
            raise ResponseAborted from None  # bytes are out: closing the connection is the signal
        except OpenAIError as err:
            outcome = SHED if err.status == 429 else REJECTED
            if not isinstance(err, NoPodAnswered):  # the forwarder already counted its attempts
                self.metrics.request_done("-", state.profile, outcome)
            rec.status, rec.outcome = err.status, outcome if rec.outcome == "-" else rec.outcome
            await send_error(send, err)
        finally:
            rec.profile = state.profile
            if rec.outcome == OK:
                usage = usage_from_tail((state.prev + state.tail)[-TAIL_BYTES:])
                if usage is not None:
                    rec.prompt_tokens, rec.completion_tokens = usage
            self.metrics.request_finished(rec, operation_name(path))
            rec.write(self.access_log)

    async def _serve_until_disconnect(
        self,
        state: _RequestState,
        parsed: ParsedRequest,
        headers: dict[str, str],
        path: str,
        body: bytes,
        scope: Scope,
        receive: Receive,
        send: Send,
        rec: RequestRecord,
    ) -> None:
        """Pick and forward while watching for the client leaving.

        A departure while queued in admission frees the queue slot at once; a departure while the
        pod works cancels the pod request (the pod frees its batch slot and KV blocks).
        """
        trace_ctx = in_client_trace(headers)

        async def guarded_send(msg: Message) -> None:
            if msg["type"] == "http.response.body" and not msg.get("more_body", False):
                state.done = True
            await send(msg)

        def keep_tail(chunk: bytes) -> None:
            state.prev, state.tail = state.tail, chunk

        body_out = Observed(StreamBody(scope, guarded_send), keep_tail)

        async def work() -> None:
            with trace_ctx:  # the client's trace, in the task that does the work
                pick = await self.dispatcher.pick(parsed, headers)
                state.profile = pick.profile
                state.counted = True  # from here the forwarder records the outcome
                await self.forwarder.forward(
                    pick, path, body, upstream_request_headers(headers), guarded_send, rec, body_out
                )

        # OpenAIError etc. from the work propagate; a response that finished as the client closed
        # is left to end normally (nothing to cancel).
        if await run_until_disconnect(work(), scope, receive, finished=lambda: state.done):
            log.debug("client disconnected; request cancelled")
            raise ClientGone

    # --- control endpoints ----------------------------------------------
    async def _models(self, scope: Scope, receive: Receive, send: Send) -> None:
        try:
            self.auth.verify_asgi("GET", scope["path"], scope["headers"], b"")
        except OpenAIError as err:
            await send_error(send, err)
            return
        await send_json(send, 200, models_listing(self.pool))

    async def _status_page(self, scope: Scope, receive: Receive, send: Send) -> None:
        """Per-pod rows for operators (`request_path/status_page.py`); guarded like `/v1/models`."""
        try:
            self.auth.verify_asgi("GET", scope["path"], scope["headers"], b"")
        except OpenAIError as err:
            await send_error(send, err)
            return
        body = render_pods(self.pool.pods(), time.monotonic()).encode()
        await send_body(send, 200, body, [(b"content-type", b"text/html; charset=utf-8")])

    async def _health(self, scope: Scope, receive: Receive, send: Send) -> None:
        await send_json(send, 200, self._health_body)  # which worker answered: for operators and tests

    async def _ready(self, scope: Scope, receive: Receive, send: Send) -> None:
        r = readiness(self.pool.pods(), time.monotonic())  # degraded still serves: see readiness.py
        ready = r.ready and not self.draining
        doc: dict[str, Any] = {
            "ready": ready,
            "pods": r.pods,
            "readyPods": r.ready_pods,
            "degraded": r.degraded,
        }
        if self.draining:
            doc["draining"] = True
            doc.update(
                OpenAIError(503, "Draining: this gateway is shutting down.", code="gateway_draining").body()
            )
        elif not r.ready:  # an OpenAI-shaped error too, like every other error a client can see
            why = "no pod is known yet" if not r.pods else "no pod is ready (fresh metrics, not ejected)"
            doc.update(OpenAIError(503, f"Not ready: {why}.", code="gateway_not_ready").body())
        await send_json(send, 200 if ready else 503, msgspec.json.encode(doc))

    async def _metrics(self, scope: Scope, receive: Receive, send: Send) -> None:
        body, ctype = await self.metrics.render_async()  # cached ≤ 1 s, rendered off the loop
        await send_body(send, 200, body, [(b"content-type", ctype.encode())])
