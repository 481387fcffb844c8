"""Send a scheduled request to its pod and stream the answer back, failing over until the first token.

Nothing admitted is lost before the first token: the response start is held back until the pod's
first body chunk arrives (vLLM sends `200` + SSE headers when it *accepts* a stream, long before
any token, so relaying headers at once would commit a stream that may still die in the pod's
queue). Until then every failure — a refused or reset connection, no answer within
`proxy.firstByteTimeoutS`, a 5xx — moves the request to the next-ranked pod, up to
`proxy.maxAttempts` and within the retry budget. Once a byte reached the client nothing is retried
(no duplicate generation): a broken stream ends with an OpenAI error event and `[DONE]`.

Every outcome feeds outlier detection (`outliers.py`), which ejects pods whose requests fail and
ranks recently failing pods last. Pods are reached through the O(1) keep-alive pools of
`common.upstream` (why not httpx: see there).
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Any

from cluster_gateway.observability import CANCELLED, FAILED, OK, UPSTREAM_ERROR, GatewayMetrics, tracer
from cluster_gateway.pool import EndpointPool, PodState
from cluster_gateway.request_path.dispatch import Dispatcher, Pick
from cluster_gateway.request_path.headers import downstream_response_headers
from cluster_gateway.request_path.outliers import OutlierDetector
from common.config.gateway import Proxy
from common.errors import OpenAIError
from common.http import Send
from common.request_log import RequestRecord
from common.response_stream import StreamBody
from common.retry_budget import RetryBudget
from common.telemetry import data_path_span, inject_traceparent
from common.upstream import (
    BodySink,
    ConnectFailed,
    PoolTimeout,
    Response,
    UpstreamError,
    UpstreamPools,
    write_to,
)

log = logging.getLogger("fleetgate.gateway.proxy")

_ERROR_BODY_LIMIT = 64 * 1024
_JSON_TYPES = (b"application/json", b"application/problem+json")
_TRACE_HEADERS = (b"traceparent", b"tracestate")


class NoPodAnswered(OpenAIError):
    """Every attempt failed before any byte reached the client (503)."""


class StreamBroken(Exception):
    """A non-SSE response broke after bytes reached the client: only closing the connection is left."""


def _retryable_status(status: int) -> bool:
    return status >= 500 or status == 429


def _is_json(resp: Response) -> bool:
    ctype = resp.header(b"content-type") or b""
    return ctype.split(b";", 1)[0].strip().lower() in _JSON_TYPES


class Forwarder:
    def __init__(
        self,
        pool: EndpointPool,
        dispatcher: Dispatcher,
        metrics: GatewayMetrics,
        cfg: Proxy,
        *,
        outliers: OutlierDetector | None = None,
        budget: RetryBudget | None = None,
        upstreams: UpstreamPools | None = None,
    ) -> None:
        self.pool = pool
        self.dispatcher = dispatcher
        self.metrics = metrics
        self.cfg = cfg
        self.max_attempts = cfg.max_attempts
        self.debug_headers = cfg.debug_headers
        self.outliers = outliers or OutlierDetector(
            pool,
            cfg.outlier_detection,
            on_eject=lambda _pod, reason, _s: metrics.ejections.labels(reason).inc(),
        )
        rb = cfg.retry_budget
        self.budget = budget or RetryBudget(rb.ratio, min_retries=rb.min_retries, window_s=rb.window_s)
        self.upstreams = upstreams or UpstreamPools(
            max_connections=cfg.max_connections,
            connect_timeout_s=cfg.connect_timeout_s,
            idle_expiry_s=cfg.idle_connection_s,
        )
        self._seen_version = -1

    def _upstream(self, pod: PodState) -> Any:
        if self.pool.version != self._seen_version:
            self._seen_version = self.pool.version
            self.upstreams.keep_only({(p.endpoint.address, p.endpoint.port) for p in self.pool.pods()})
            self.outliers.forget_departed()
        return self.upstreams.get(pod.endpoint.address, pod.endpoint.port)

    async def forward(
        self,
        pick: Pick,
        path: str,
        body: bytes,
        headers: dict[str, str],
        send: Send,
        rec: RequestRecord | None = None,
        body_out: BodySink | None = None,
    ) -> None:
        """Deliver the request to the first pod that answers; raises OpenAIError if none does.
        `rec` (the access-log record) learns the pod, attempts, status, first-token time, outcome.
        The response's body goes to `body_out` (default: each chunk through `send`)."""
        rec = rec or RequestRecord("-", path)
        out = body_out or StreamBody({}, send)
        ranked = self.outliers.rank(pick.pods)
        # fewer pods than attempts (a small pool): a pod whose connect failed may be tried again —
        # under a burst a connect can time out on a pod that is serving fine
        pods = [ranked[i % len(ranked)] for i in range(self.max_attempts)] if ranked else []
        attempts = len(pods)
        may_retry: set[str] = {p.name for p in ranked}  # pods not yet failed otherwise
        self.budget.record_request()
        target = path.encode("latin-1")
        base_headers = [(k.encode("latin-1"), v.encode("latin-1")) for k, v in headers.items()]
        last_error = "no pod was tried"
        held: tuple[PodState, int, list[tuple[bytes, bytes]], bytes] | None = None  # last 5xx/429 answer
        tried = 0
        last_pod: PodState | None = None
        for i in range(attempts):
            pod = pods[i]
            if pod.name not in may_retry:
                continue
            if tried > 0 and not self.budget.try_retry():
                self.metrics.retry_budget_exhausted.inc()
                break
            may_retry.discard(pod.name)
            tried += 1
            last_pod = pod
            rec.attempts, rec.target = tried, pod.name
            has_next = i + 1 < attempts  # (a 5xx/429 on the last attempt is passed on as is)
            self.dispatcher.dispatched(pick, pod)
            outcome = FAILED
            committed = False
            resp: Response | None = None
            try:
                with data_path_span(tracer, "gateway.forward") as span:
                    span.set_attribute("fleetgate.pod", pod.name)
                    span.set_attribute("fleetgate.attempt", i + 1)
                    t0 = time.monotonic()
                    deadline = t0 + self.cfg.first_byte_timeout_s
                    attempt_headers = base_headers
                    tp: dict[str, str] = {}
                    if span.is_recording():
                        inject_traceparent(tp)  # the pod's parent span is this attempt
                    if tp:  # replaces the client's trace headers
                        attempt_headers = [h for h in base_headers if h[0] not in _TRACE_HEADERS] + [
                            (k.encode("latin-1"), v.encode("latin-1")) for k, v in tp.items()
                        ]
                    try:
                        resp = await self._upstream(pod).request(
                            b"POST",
                            target,
                            attempt_headers,
                            body,
                            head_timeout_s=self.cfg.first_byte_timeout_s,
                        )
                        status = resp.status
                        span.set_attribute("http.status_code", status)
                        if _retryable_status(status):
                            err_body = await resp.read(
                                max(0.001, deadline - time.monotonic()), _ERROR_BODY_LIMIT
                            )
                            if status >= 500:
                                self.outliers.failure(pod, gateway=False)
                            else:
                                self.outliers.shed(pod)
                            last_error = f"{pod.name}: HTTP {status}"
                            held = (pod, status, resp.headers, err_body if _is_json(resp) else b"")
                            if has_next:
                                self.metrics.retries.labels("status").inc()
                                log.info("pod %s answered %d; retrying on another pod", pod.name, status)
                            continue
                        first = await resp.next_chunk(max(0.001, deadline - time.monotonic()))
                    except UpstreamError as exc:
                        if isinstance(exc, ConnectFailed | PoolTimeout):
                            may_retry.add(pod.name)  # it never saw the request: again if it comes up
                        last_error = f"{pod.name}: {exc}"
                        span.set_attribute("fleetgate.error", last_error)
                        self.outliers.failure(pod, gateway=True)
                        self.metrics.retries.labels(exc.kind).inc()
                        log.info(
                            "pod %s failed before the first token (%s); trying the next pod", pod.name, exc
                        )
                        continue
                    committed = True
                    self.metrics.ttft.labels(pod.name).observe(time.monotonic() - t0)
                    rec.first_token()
                    rec.status = resp.status
                    outcome = await self._relay(resp, first, pod, send, out)
                    return
            except asyncio.CancelledError:
                outcome, committed = CANCELLED, True
                raise
            finally:
                if resp is not None:
                    resp.release()
                self.dispatcher.finished(pod)
                if committed:
                    rec.outcome = outcome
                    self.dispatcher.completed(pick, pod, outcome)
                    self.metrics.request_done(pod.name, pick.profile, outcome)
        if held is not None:
            rec.status, rec.outcome, rec.target = held[1], UPSTREAM_ERROR, held[0].name
            await self._send_held(held, pick, send)
            return
        rec.outcome = FAILED
        self.metrics.request_done(last_pod.name if last_pod else "-", pick.profile, FAILED)
        raise NoPodAnswered(
            503,
            f"No model server could take the request after {tried} attempt(s) ({last_error}).",
            code="upstream_unavailable",
            headers={"retry-after": "1"},
        )

    async def _send_held(
        self, held: tuple[PodState, int, list[tuple[bytes, bytes]], bytes], pick: Pick, send: Send
    ) -> None:
        """Every pod tried answered 5xx/429: pass the last answer on (as OpenAI JSON)."""
        pod, status, headers, body = held
        if not body:
            body = OpenAIError(
                502 if status >= 500 else status,
                f"The model server answered HTTP {status}.",
                code="upstream_error",
            ).body_bytes()
            headers = [(b"content-type", b"application/json")]
        out = [(k, v) for k, v in downstream_response_headers(headers, None) if k != b"content-length"]
        out.append((b"content-length", str(len(body)).encode()))
        await send({"type": "http.response.start", "status": status, "headers": out})
        await send({"type": "http.response.body", "body": body, "more_body": False})
        self.metrics.request_done(pod.name, pick.profile, UPSTREAM_ERROR)

    async def _relay(self, resp: Response, first: bytes, pod: PodState, send: Send, out: BodySink) -> str:
        """Stream the pod's response to the client, first chunk in hand; returns the outcome label."""
        await send(
            {
                "type": "http.response.start",
                "status": resp.status,
                "headers": downstream_response_headers(
                    resp.headers, pod.name if self.debug_headers else None
                ),
            }
        )
        if resp.status < 500:
            self.outliers.success(pod)
        is_sse = (resp.header(b"content-type") or b"").startswith(b"text/event-stream")
        try:
            await write_to(out, first)
            await resp.relay(out, self.cfg.read_timeout_s)
        except UpstreamError as exc:
            # Bytes already reached the client: no retry possible. Close the stream visibly.
            log.warning("stream from pod %s broke after the first token: %s", pod.name, exc)
            self.outliers.failure(pod, gateway=True)
            if not is_sse:
                raise StreamBroken(str(exc)) from None
            err = OpenAIError(502, f"The model server stream broke: {exc}", code="upstream_error")
            payload = b"data: " + err.body_bytes() + b"\n\ndata: [DONE]\n\n"
            await send({"type": "http.response.body", "body": payload, "more_body": False})
            return FAILED
        await send({"type": "http.response.body", "body": b"", "more_body": False})
        return OK if resp.status < 400 else UPSTREAM_ERROR

    def close(self) -> None:
        self.upstreams.close()
