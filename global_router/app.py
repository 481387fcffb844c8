"""The global endpoint (litestar on uvicorn): OpenAI routes, models, fleet JSON, status page, admin.

The two completion routes are raw ASGI handlers inside litestar: they stream bytes, watch for the
client leaving (so the cluster's request is cancelled and the reservation settled at once) and
decide the status only after a cluster answered. Everything else is ordinary litestar routing.
Order per request: authenticate → read body (size cap) → validate → allow-list → rank clusters
(no I/O) → rate-limit admission (one Redis round trip) → forward with failover → reconcile tokens.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import msgspec
from litestar import Litestar, MediaType, Request, Response, get, post
from litestar.exceptions import HTTPException
from litestar.params import FromPath
from opentelemetry import trace
from prometheus_client import CONTENT_TYPE_LATEST, REGISTRY, generate_latest

from common.asgi import ClientGone, read_body, run_until_disconnect
from common.config.router import GlobalRouterConfig
from common.errors import OpenAIError, error_body, not_found_model
from common.genai_metrics import operation_name
from common.http import ASGIApp, Receive, Scope, Send, send_error
from common.openai_request import CHAT_PATH, COMPLETIONS_PATH, parse_request
from common.request_log import REQUEST_ID_HEADER, RequestRecord, request_id, with_request_id
from common.response_stream import StreamBody
from common.telemetry import data_path_span, in_client_trace
from global_router.dispatch_tracker import DispatchTracker
from global_router.failover import ClusterHealth, RetryBudget
from global_router.fleet_report import fleet_report
from global_router.fleet_view import FleetView, FleetViewError
from global_router.forward import CLUSTER_HEADER, Delivery, Forwarder, ForwardRequest
from global_router.headers import CLIENT_REGION_HEADER, decode_headers, upstream_headers
from global_router.metrics import (
    CANCELLED,
    CLIENT_ERROR,
    FAILED,
    OK,
    REJECTED,
    UPSTREAM_ERROR,
    RateMeter,
    RouterMetrics,
)
from global_router.model_listing import model_entries
from global_router.ratelimit import Admission, RateLimiter, reservation_tokens
from global_router.readiness import Readiness
from global_router.request_totals import request_totals
from global_router.selection import Candidate, ClusterSelector, SelectionRequest
from global_router.status_access import StatusAccess, redact
from global_router.status_page import render_status
from global_router.tenants import TenantDirectory, check_admin

log = logging.getLogger("fleetgate.router")
tracer = trace.get_tracer("fleetgate.global_router")


@dataclass(slots=True)
class RouterServices:
    """Everything a request touches, composed once by `GlobalRouter`."""

    cfg: GlobalRouterConfig
    fleet: FleetView
    tenants: TenantDirectory
    selector: ClusterSelector
    limiter: RateLimiter
    forwarder: Forwarder
    health: ClusterHealth
    budget: RetryBudget
    tracker: DispatchTracker
    metrics: RouterMetrics
    rates: RateMeter = field(default_factory=RateMeter)
    router_info: Callable[[], dict[str, Any]] = field(default=lambda: {})
    readiness: Readiness | None = None  # None: ready whenever a cluster is routable


def _encode_headers(headers: dict[str, str]) -> list[tuple[bytes, bytes]]:
    return [(k.encode("latin-1"), v.encode("latin-1")) for k, v in headers.items()]


def openai_error_response(err: OpenAIError) -> Response[bytes]:
    return Response(err.body_bytes(), status_code=err.status, headers=err.headers, media_type=MediaType.JSON)


class CompletionHandler:
    """`POST /v1/completions` and `POST /v1/chat/completions` as raw ASGI."""

    def __init__(self, s: RouterServices) -> None:
        self.s = s
        self.max_body = s.cfg.max_body_bytes
        # a router deployed in a region (behind geo DNS) serves that region's clients by default
        self.default_region = s.cfg.region if s.cfg.region != "global" else None

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope.get("method") != "POST":
            await send_error(send, OpenAIError(405, f"Method {scope.get('method')} not allowed"))
            return
        headers = decode_headers(scope["headers"])
        rid = request_id(headers.get(REQUEST_ID_HEADER))
        headers[REQUEST_ID_HEADER] = rid  # the gateway (and the pod) log the same id
        rec = RequestRecord(rid, scope["path"])
        send = with_request_id(send, rid)
        try:
            # in the client's trace when it sent one (the gateway's rule too): the router's log
            # lines carry the client's trace id even with no span exported
            with in_client_trace(headers):
                await self._handle(scope, headers, receive, send, rec)
        finally:
            ok = rec.outcome == OK
            self.s.metrics.genai.observe(rec, operation_name(scope["path"]), ok, time.monotonic())
            rec.write(self.s.cfg.access_log)

    async def _handle(
        self, scope: Scope, headers: dict[str, str], receive: Receive, send: Send, rec: RequestRecord
    ) -> None:
        s = self.s
        path: str = scope["path"]
        traffic_class = "-"
        try:
            tenant = s.tenants.authenticate(headers.get("authorization"))
            traffic_class = rec.traffic_class = tenant.traffic_class
            rec.tenant = tenant.name
            body = await read_body(receive, headers.get("content-length"), self.max_body)
            parsed = parse_request(body, path)
            rec.model, rec.stream, rec.prompt_tokens = parsed.model, parsed.stream, parsed.prompt_tokens
            s.tenants.check_model(tenant, parsed.model)
            sel_req = SelectionRequest(
                model=parsed.model,
                traffic_class=tenant.traffic_class,
                client_region=headers.get(CLIENT_REGION_HEADER) or self.default_region,
                sheddable=tenant.sheddable,
            )
            t0 = time.perf_counter()
            with data_path_span(tracer, "router.select") as span:
                ranking = s.selector.rank(
                    s.fleet.snapshot(),
                    sel_req,
                    ejected=s.health.ejected(),
                    candidates=s.fleet.candidates(sel_req.model),
                )
                span.set_attribute("fleetgate.cluster", ranking.candidates[0].cluster_id)
                span.set_attribute("fleetgate.candidates", len(ranking.candidates))
            s.metrics.selection_seconds.observe(time.perf_counter() - t0)
            reserve = reservation_tokens(
                parsed.prompt_tokens, parsed.max_tokens, s.cfg.rate_limits.default_max_tokens
            )
            try:
                admission = await s.limiter.admit(tenant, reserve)
            except OpenAIError as err:
                s.metrics.ratelimit.inc((tenant.name, err.code or str(err.status)))
                raise
            s.metrics.ratelimit.inc((tenant.name, "allowed"))
            fwd = ForwardRequest(
                path=path,
                body=body,
                headers=upstream_headers(headers, tenant, ranking.policy.gateway_profile),
                stream=parsed.stream,
                prompt_tokens=parsed.prompt_tokens,
                traffic_class=tenant.traffic_class,
            )
        except ClientGone:
            rec.outcome = CANCELLED
            s.metrics.requests.inc(("-", traffic_class, CANCELLED))
            return
        except OpenAIError as err:
            rec.status, rec.outcome = err.status, REJECTED
            s.metrics.requests.inc(("-", traffic_class, REJECTED))
            await send_error(send, err)
            return
        await self._forward_watching_disconnect(
            ranking.candidates, fwd, admission, traffic_class, scope, receive, send, rec
        )

    async def _forward_watching_disconnect(
        self,
        candidates: list[Candidate],
        fwd: ForwardRequest,
        admission: Admission,
        traffic_class: str,
        scope: Scope,
        receive: Receive,
        send: Send,
        rec: RequestRecord,
    ) -> None:
        s = self.s
        state: dict[str, Any] = {"delivery": None, "outcome": CANCELLED, "cluster": "-", "started": False}

        async def work() -> None:
            try:
                delivery = await s.forwarder.open(candidates, fwd)
            except OpenAIError as err:
                state["outcome"] = FAILED
                rec.status = err.status
                await send_error(send, err, admission.headers)
                return
            state["delivery"] = delivery
            state["cluster"] = delivery.cluster_id
            rec.first_token()
            s.rates.mark(delivery.cluster_id)
            hdrs = {**delivery.headers, **admission.headers, CLUSTER_HEADER: delivery.cluster_id}
            state["started"] = True
            if delivery.body is not None:
                hdrs["content-length"] = str(len(delivery.body))
            await send(
                {"type": "http.response.start", "status": delivery.status, "headers": _encode_headers(hdrs)}
            )
            if delivery.body is not None:
                await send({"type": "http.response.body", "body": delivery.body, "more_body": False})
            else:
                await s.forwarder.relay(delivery, fwd.prompt_tokens, StreamBody(scope, send))
                await send({"type": "http.response.body", "body": b"", "more_body": False})
            state["outcome"] = (
                delivery.outcome
                if delivery.ok
                else (UPSTREAM_ERROR if delivery.status >= 500 or delivery.status == 429 else CLIENT_ERROR)
            )

        try:
            try:
                await run_until_disconnect(work(), scope, receive)  # a departure leaves the outcome CANCELLED
            except OSError:  # the client went away while we were writing to it
                state["outcome"] = CANCELLED
            except Exception:
                log.exception("forwarding failed")
                state["outcome"] = FAILED
                if not state["started"]:
                    err = OpenAIError(500, "Internal error in the global router while forwarding.")
                    await send_error(send, err, admission.headers)
        finally:
            delivery: Delivery | None = state["delivery"]
            used = 0
            if delivery is not None:
                await s.forwarder.close(delivery)
                if not delivery.ok:
                    used = 0
                elif delivery.body is None:  # streamed, maybe cut short by the client: what was generated
                    used = delivery.usage.total(fwd.prompt_tokens)
                else:
                    used = delivery.used_tokens
            await s.limiter.complete(admission, used)
            s.metrics.requests.inc((state["cluster"], traffic_class, state["outcome"]))
            rec.target, rec.outcome = state["cluster"], state["outcome"]
            if delivery is not None:
                rec.status, rec.attempts = delivery.status, delivery.attempts
                if used and delivery.ok:
                    rec.completion_tokens = max(0, used - fwd.prompt_tokens)
                    # the model server's own split where it gave one (else: the estimate above)
                    usage = delivery.usage
                    if usage.prompt is not None and usage.completion is not None:
                        rec.prompt_tokens, rec.completion_tokens = usage.prompt, usage.completion


class CompletionFront:
    """The two completion paths straight to `CompletionHandler`; every other request to Litestar.

    Completions are the data path: Litestar's router, exception middleware and `send` wrapper
    cost ~5% of a proxied request's CPU and give it nothing (the handler answers its own errors
    in OpenAI's shape; `json_errors` catches the rest). The management routes keep Litestar."""

    __slots__ = ("app", "completion", "routes")

    def __init__(self, app: Litestar, completion: CompletionHandler) -> None:
        self.app: ASGIApp = app  # type: ignore[assignment]  # Litestar types its scope narrower
        self.completion = completion
        self.routes = frozenset({CHAT_PATH, COMPLETIONS_PATH})

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and scope["path"] in self.routes:
            await self.completion(scope, receive, send)  # answers 405 itself for other methods
        else:
            await self.app(scope, receive, send)


def build_app(s: RouterServices) -> CompletionFront:
    completion = CompletionHandler(s)

    def _models(request: Request[Any, Any, Any]) -> dict[str, dict[str, Any]]:
        """Models of routable (fresh or stale) clusters this tenant may use, in OpenAI's shape."""
        tenant = s.tenants.authenticate(request.headers.get("authorization"))
        now = time.time()
        entries = model_entries(c for c in s.fleet.snapshot() if s.selector.is_known(c, now))
        return {m: entries[m] for m in s.tenants.visible_models(tenant, list(entries))}

    @get("/v1/models", sync_to_thread=False)
    def list_models(request: Request[Any, Any, Any]) -> Response[bytes]:
        data = list(_models(request).values())
        return Response(msgspec.json.encode({"object": "list", "data": data}), media_type=MediaType.JSON)

    @get("/v1/models/{model_id:path}", sync_to_thread=False)
    def retrieve_model(request: Request[Any, Any, Any], model_id: FromPath[str]) -> Response[bytes]:
        model = model_id.lstrip("/")
        found = _models(request).get(model)
        if found is None:
            raise not_found_model(model)
        return Response(msgspec.json.encode(found), media_type=MediaType.JSON)

    def _update_gauges() -> None:
        now = time.time()
        snap = s.fleet.snapshot()
        fresh = stale = 0
        for c in snap:
            is_fresh = s.selector.is_fresh(c, now)
            fresh += is_fresh
            stale += not is_fresh
            s.metrics.report_age.labels(c.cluster_id).set(round(c.age(now), 3))
            s.metrics.cluster_stale.labels(c.cluster_id).set(0 if is_fresh else 1)
        s.metrics.fresh_clusters.set(fresh)
        s.metrics.stale_clusters.set(stale)

    def _report() -> dict[str, Any]:
        _update_gauges()
        return fleet_report(
            s.fleet.snapshot(),
            stale_after_s=s.cfg.capacity.stale_after_s,
            health=s.health,
            tracker=s.tracker,
            rates=s.rates,
            budget=s.budget,
            router={"region": s.cfg.region, "rate_limiter": s.limiter.mode, **s.router_info()},
            totals=request_totals(s.metrics.requests, s.metrics.ratelimit),
        )

    status_access = StatusAccess(s.cfg)

    def _visible_report(request: Request[Any, Any, Any]) -> dict[str, Any]:
        """401/403 unless allowed; without an admin/status key a public view has no gateway URLs."""
        full = status_access.authorize(request.headers.get("authorization"))
        return _report() if full else redact(_report())

    @get("/fleet", sync_to_thread=False)
    def fleet(request: Request[Any, Any, Any]) -> Response[bytes]:
        return Response(msgspec.json.encode(_visible_report(request)), media_type=MediaType.JSON)

    @get("/", sync_to_thread=False)
    def status_page(request: Request[Any, Any, Any]) -> Response[str]:
        return Response(render_status(_visible_report(request)), media_type=MediaType.HTML)

    @get("/health", sync_to_thread=False)
    def health() -> Response[bytes]:
        fresh = sum(1 for c in s.fleet.snapshot() if s.selector.is_fresh(c))
        return Response(
            msgspec.json.encode({"status": "ok", "fresh_clusters": fresh, "rate_limiter": s.limiter.mode}),
            media_type=MediaType.JSON,
        )

    @get("/ready")
    async def ready() -> Response[bytes]:
        readiness = s.readiness or Readiness(s.fleet, s.selector)
        ok, detail = await readiness.check()
        if ok:
            return Response(msgspec.json.encode(detail), media_type=MediaType.JSON)
        err = OpenAIError(
            503,
            "Not ready: no routable cluster yet"
            + ("" if detail.get("redis_answered", True) else " and Redis has not answered")
            + ".",
            code="router_not_ready",
            headers={"retry-after": "1"},
        )
        if detail.get("draining"):
            err = OpenAIError(503, "Draining: this replica is shutting down.", code="router_draining")
        return openai_error_response(err)

    @get("/metrics", sync_to_thread=True)  # a render does not hold the event loop
    def metrics() -> Response[bytes]:
        _update_gauges()
        # the router's own registry, then the process-wide one (capacity server, process stats)
        body = generate_latest(s.metrics.registry) + generate_latest(REGISTRY)
        return Response(body, media_type=CONTENT_TYPE_LATEST)

    @post("/admin/clusters/{cluster_id:str}/drain", status_code=200)
    async def drain(request: Request[Any, Any, Any], cluster_id: FromPath[str]) -> Response[bytes]:
        check_admin(request.headers.get("authorization"), s.cfg.admin_key_sha256)
        raw = await request.body()
        drain_on = True
        if raw.strip():
            try:
                doc = msgspec.json.decode(raw)
            except msgspec.DecodeError:
                raise OpenAIError(
                    400, 'Body must be JSON like {"drain": true}.', code="invalid_json"
                ) from None
            if not isinstance(doc, dict) or not isinstance(doc.get("drain", True), bool):
                raise OpenAIError(400, "'drain' must be a boolean.", param="drain")
            drain_on = bool(doc.get("drain", True))
        if not _known_cluster(cluster_id):  # a mistyped id must not look like a drain that worked
            raise OpenAIError(
                404,
                f"Unknown cluster {cluster_id!r}: it has not reported to this router, is not a "
                "configured agent and is not drained.",
                param="cluster_id",
                code="cluster_not_found",
                type="invalid_request_error",
            )
        try:
            await s.fleet.set_router_drain(cluster_id, drain_on)
        except FleetViewError as exc:
            raise OpenAIError(
                503, f"Could not record the drain: {exc}", code="fleet_store_unavailable"
            ) from None
        log.info("operator %s cluster %s at the router", "drained" if drain_on else "undrained", cluster_id)
        return Response(
            msgspec.json.encode({"cluster_id": cluster_id, "router_drain": drain_on}),
            media_type=MediaType.JSON,
        )

    configured = frozenset(a.cluster_id for a in s.cfg.capacity.agents)

    def _known_cluster(cluster_id: str) -> bool:
        """Reported (fresh or stale), configured as an agent, or already drained (to undrain it)."""
        return (
            cluster_id in configured
            or s.fleet.get(cluster_id) is not None
            or s.fleet.router_drained(cluster_id)
        )

    @get("/admin/drains", sync_to_thread=False)
    def list_drains(request: Request[Any, Any, Any]) -> Response[bytes]:
        """Clusters out of rotation: drained by an operator here, or draining by their own report."""
        check_admin(request.headers.get("authorization"), s.cfg.admin_key_sha256)
        states = {c.cluster_id: c for c in s.fleet.snapshot()}
        drains = [
            {"cluster_id": cid, "by": "operator", "reported": cid in states}
            for cid in s.fleet.router_drains()
        ]
        drains += [
            {"cluster_id": cid, "by": "cluster", "reported": True}
            for cid, c in sorted(states.items())
            if c.draining and not c.router_drain
        ]
        return Response(msgspec.json.encode({"object": "list", "data": drains}), media_type=MediaType.JSON)

    def on_openai_error(_: Request[Any, Any, Any], exc: OpenAIError) -> Response[bytes]:
        return openai_error_response(exc)

    def on_http_error(_: Request[Any, Any, Any], exc: HTTPException) -> Response[bytes]:
        status = exc.status_code
        code = {404: "unknown_url", 405: "method_not_allowed", 413: "request_too_large"}.get(status)
        return openai_error_response(OpenAIError(status, str(exc.detail), code=code, headers=exc.headers))

    def on_error(_: Request[Any, Any, Any], exc: Exception) -> Response[bytes]:
        log.exception("unhandled error", exc_info=exc)
        body = msgspec.json.encode(error_body("Internal error in the global router.", type="server_error"))
        return Response(body, status_code=500, media_type=MediaType.JSON)

    app = Litestar(
        route_handlers=[
            list_models,
            retrieve_model,
            fleet,
            status_page,
            health,
            ready,
            metrics,
            drain,
            list_drains,
        ],
        exception_handlers={OpenAIError: on_openai_error, HTTPException: on_http_error, Exception: on_error},
        openapi_config=None,
        logging_config=None,
        request_max_body_size=s.cfg.max_body_bytes,
    )
    return CompletionFront(app, completion)
