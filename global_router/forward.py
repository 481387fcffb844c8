"""Send a request to the ranked clusters' gateways, failing over until one answers.

Nothing is committed to the client until a cluster has answered well: a non-streaming body is read
whole, a stream's first chunk is read, before the response starts. Until then a refused connection,
a reset, a 5xx, a 429, a 401/403/404 (see `cluster_failure`) moves the request to the next-ranked
cluster, within `maxAttempts` and the retry budget, so an admitted request survives a cluster dying
under it. Once bytes have reached the client a broken stream is ended with an SSE error event and
`[DONE]` — never silently truncated.
"""

from __future__ import annotations

import logging
import time
from collections.abc import AsyncGenerator, AsyncIterator, Iterable, Sequence
from dataclasses import dataclass, field

import httpx
import msgspec
from opentelemetry import trace

from common.config.router import Failover
from common.errors import OpenAIError, error_body
from global_router.cluster_failure import counts_as_cluster_failure, retry_elsewhere
from global_router.dispatch_tracker import DispatchTracker
from global_router.failover import ClusterHealth, RetryBudget
from global_router.headers import with_trace_context
from global_router.metrics import OK, STREAM_BROKEN, UPSTREAM_ERROR, RouterMetrics
from global_router.selection import Candidate
from global_router.usage import StreamUsage, usage_from_body

log = logging.getLogger("fleetgate.router.forward")
tracer = trace.get_tracer("fleetgate.global_router")

CLUSTER_HEADER = "x-fleetgate-cluster"
_HOP_BY_HOP = frozenset(
    {"connection", "keep-alive", "proxy-authenticate", "proxy-authorization", "te", "trailer"}
    | {"transfer-encoding", "upgrade", "content-length", "server", "date"}
)


def downstream_headers(headers: Iterable[tuple[str, str]]) -> dict[str, str]:
    """The gateway's response headers fit for the client (no hop-by-hop, no internal ones)."""
    return {
        k: v for k, v in headers if (n := k.lower()) not in _HOP_BY_HOP and not n.startswith("x-fleetgate-")
    }


def sse_error_tail(message: str, code: str = "upstream_stream_error") -> bytes:
    body = error_body(message, type="server_error", code=code)
    return b"data: " + msgspec.json.encode(body) + b"\n\ndata: [DONE]\n\n"


@dataclass(slots=True)
class ForwardRequest:
    path: str
    body: bytes
    headers: dict[str, str]  # already sanitised upstream headers
    stream: bool
    prompt_tokens: int
    traffic_class: str = "interactive"


@dataclass(slots=True)
class Delivery:
    """A committed answer: status and headers known, body whole or streaming."""

    cluster_id: str
    status: int
    headers: dict[str, str]
    attempts: int
    body: bytes | None = None  # non-streaming
    first_chunk: bytes = b""
    response: httpx.Response | None = None  # streaming: the open upstream response
    chunks: AsyncIterator[bytes] | None = None  # ...and its raw byte iterator, first chunk taken
    usage: StreamUsage = field(default_factory=StreamUsage)
    used_tokens: int = 0
    outcome: str = OK
    _closed: bool = False

    @property
    def ok(self) -> bool:
        return self.status < 400


class _Retryable(Exception):
    def __init__(
        self, reason: str, status: int | None = None, body: bytes = b"", headers: dict[str, str] | None = None
    ) -> None:
        super().__init__(reason)
        self.reason = reason
        self.status = status
        self.body = body
        self.headers = headers or {}


class Forwarder:
    def __init__(
        self,
        clients: Sequence[httpx.AsyncClient],
        cfg: Failover,
        *,
        health: ClusterHealth,
        budget: RetryBudget,
        tracker: DispatchTracker,
        metrics: RouterMetrics,
    ) -> None:
        # Several pooled clients used in turn: httpcore scans its whole pool for every request, so one
        # pool holding ~1k connections costs O(n) per request; K pools cut that by K, pooling intact.
        self._clients = list(clients)
        self._turn = 0
        self._cfg = cfg
        self._health = health
        self._budget = budget
        self._tracker = tracker
        self._metrics = metrics

    async def open(self, candidates: list[Candidate], req: ForwardRequest) -> Delivery:
        """Try candidates in rank order until one answers; raises OpenAIError when none did."""
        self._budget.record_request()
        last: _Retryable | None = None
        attempts = 0
        for i, cand in enumerate(candidates[: self._cfg.max_attempts]):
            if i > 0:
                if not self._budget.try_retry():
                    self._metrics.retry_budget_exhausted.inc()
                    break
                prev = candidates[i - 1].cluster_id
                self._metrics.failovers.labels(prev, last.reason if last else "error").inc()
            attempts += 1
            try:
                delivery = await self._attempt(cand, req)
            except _Retryable as exc:
                last = exc
                log.info(
                    "cluster %s failed before the first byte (%s); trying the next",
                    cand.cluster_id,
                    exc.reason,
                )
                continue
            delivery.attempts = attempts
            return delivery
        if last is not None and last.status is not None:
            # every attempt was answered with 5xx/429/404: pass the last one through (OpenAI body)
            cid = candidates[min(attempts, len(candidates)) - 1].cluster_id
            return Delivery(cid, last.status, last.headers, attempts, body=last.body, outcome=UPSTREAM_ERROR)
        reason = last.reason if last else "no attempt"
        raise OpenAIError(
            503,
            f"No cluster could serve the request after {attempts} attempt(s) (last error: {reason}).",
            code="no_cluster_answered",
            headers={"retry-after": "1"},
        )

    async def _attempt(self, cand: Candidate, req: ForwardRequest) -> Delivery:
        cid = cand.cluster_id
        url = cand.cluster.gateway_url.rstrip("/") + req.path
        self._tracker.on_dispatch(cid, cand.cluster.seq)
        self._metrics.inflight.labels(cid).inc()
        started = time.perf_counter()
        resp: httpx.Response | None = None
        handed_over = False
        try:
            with tracer.start_as_current_span("router.forward") as span:
                span.set_attribute("fleetgate.cluster", cid)
                span.set_attribute("fleetgate.traffic_class", req.traffic_class)
                try:
                    sent = with_trace_context(req.headers)  # this attempt's span is the parent
                    self._turn = (self._turn + 1) % len(self._clients)
                    client = self._clients[self._turn]
                    request = client.build_request("POST", url, content=req.body, headers=sent)
                    resp = await client.send(request, stream=True)
                    status = resp.status_code
                    span.set_attribute("http.response.status_code", status)
                    if retry_elsewhere(status):  # see global_router/cluster_failure.py
                        body = await resp.aread()
                        if counts_as_cluster_failure(status):
                            self._fail(cid)
                        raise _Retryable(
                            f"HTTP {status}", status, body, downstream_headers(resp.headers.items())
                        )
                    headers = downstream_headers(resp.headers.items())
                    if not req.stream or status >= 400:
                        body = await resp.aread()
                        self._metrics.ttfb_seconds.labels(cid).observe(time.perf_counter() - started)
                        used = usage_from_body(body) if status < 400 else 0
                        self._health.record_success(cid)
                        return Delivery(
                            cid,
                            status,
                            headers,
                            0,
                            body=body,
                            used_tokens=used if used is not None else req.prompt_tokens,
                        )
                    chunks = resp.aiter_raw()
                    first = b""
                    async for chunk in chunks:
                        if chunk:
                            first = chunk
                            break
                    self._metrics.ttfb_seconds.labels(cid).observe(time.perf_counter() - started)
                    if not first:
                        self._fail(cid)
                        raise _Retryable("empty stream")
                    delivery = Delivery(
                        cid, status, headers, 0, first_chunk=first, response=resp, chunks=chunks
                    )
                    delivery.usage.feed(first)
                    handed_over = True
                    return delivery
                except httpx.HTTPError as exc:
                    self._fail(cid)
                    span.record_exception(exc)
                    raise _Retryable(type(exc).__name__) from None
        finally:
            if not handed_over:
                if resp is not None:
                    await resp.aclose()
                self._tracker.on_done(cid)
                self._metrics.inflight.labels(cid).dec()

    def _fail(self, cid: str) -> None:
        if self._health.record_failure(cid):
            self._metrics.ejections.labels(cid).inc()

    async def stream(self, d: Delivery, prompt_tokens: int) -> AsyncGenerator[bytes, None]:
        """The stream's bytes for the client, first chunk included; a break ends with an SSE error."""
        yield d.first_chunk
        assert d.chunks is not None
        try:
            async for chunk in d.chunks:
                d.usage.feed(chunk)
                yield chunk
        except httpx.HTTPError as exc:
            self._fail(d.cluster_id)
            d.outcome = STREAM_BROKEN
            log.warning(
                "stream from cluster %s broke after bytes were sent: %s", d.cluster_id, type(exc).__name__
            )
            yield sse_error_tail(
                f"The upstream cluster stopped responding mid-stream ({type(exc).__name__}); "
                "the response is incomplete."
            )
        else:
            self._health.record_success(d.cluster_id)
        finally:
            d.used_tokens = d.usage.total(prompt_tokens)

    async def close(self, d: Delivery) -> None:
        """Release the upstream response and the in-flight count (idempotent; call in `finally`)."""
        if d._closed:
            return
        d._closed = True
        if d.response is not None:
            await d.response.aclose()
            self._tracker.on_done(d.cluster_id)
            self._metrics.inflight.labels(d.cluster_id).dec()
