"""Send a request to the ranked clusters' gateways, failing over until one answers.

Nothing is committed to the client until a cluster has answered well: a non-streaming body is read
whole, a stream's first chunk is read, before the response starts. Until then a refused connection,
a reset, a 5xx, a 429, a 401/403/404 (see `cluster_failure`) moves the request to the next-ranked
cluster, within `maxAttempts` and the retry budget, so an admitted request survives a cluster dying
under it. Once bytes have reached the client a broken stream is ended with an SSE error event and
`[DONE]` — never silently truncated.

Two deadlines bound the wait before the first byte. `ackTimeoutS` (seconds): the gateway must
acknowledge the request — its HTTP server answers the `expect: 100-continue` the router sends with an
interim 100 when the gateway starts reading the request (50 ms later when the body came whole, and
not at all if the answer is out by then), or answers outright — else the path is
taken for black-holed (connections accepted, nothing comes back: reports travel another path and can
look healthy), the cluster is ejected at once and the request moves on; retrying is safe, since no
byte reached the client. `firstByteTimeoutS` (minutes) then bounds the answer itself, since a long
prompt's prefill or the gateway's own queue and pod retries legitimately take long. Why an interim
100 and not the response head sent early: a head commits the status before the gateway knows it,
which would turn its pod retries' 503 (the router fails over) into a 200 carrying an error, and a
non-streaming answer's status into a guess; a 1xx commits nothing and costs no round trip, as the
body goes out with the head (docs/global-router-resilience.md).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterable
from dataclasses import dataclass, field

import msgspec
from opentelemetry import trace
from prometheus_client import Gauge

from common.config.router import Failover
from common.errors import OpenAIError, error_body
from common.http import HOP_BY_HOP
from common.response_stream import Observed
from common.telemetry import data_path_span
from common.upstream import BodySink, Response, UpstreamError, UpstreamPools, UpstreamTimeout, write_to
from global_router.cluster_failure import counts_as_cluster_failure, retry_elsewhere
from global_router.dispatch_tracker import DispatchTracker
from global_router.failover import ClusterHealth, RetryBudget
from global_router.gateway_address import GatewayAddress, parse_gateway_url
from global_router.gateway_signer import GatewaySigner
from global_router.headers import with_trace_context
from global_router.metrics import OK, STREAM_BROKEN, UPSTREAM_ERROR, RouterMetrics
from global_router.selection import Candidate
from global_router.usage import StreamUsage

log = logging.getLogger("fleetgate.router.forward")
tracer = trace.get_tracer("fleetgate.global_router")

CLUSTER_HEADER = "x-fleetgate-cluster"
# what a client sees when every tried gateway refused the router's credential (never the gateway's
# own 401: the client's key was fine)
GATEWAY_REFUSED = msgspec.json.encode(
    error_body(
        "A cluster gateway refused the router's credentials.", type="server_error", code="gateway_refused"
    )
)
_JSON_HEADERS = {"content-type": "application/json"}
_HOP_BY_HOP = HOP_BY_HOP | {"content-length", "server", "date"}


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
    response: Response | None = None  # streaming: the open upstream response, first chunk taken
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
        upstreams: UpstreamPools,
        cfg: Failover,
        *,
        health: ClusterHealth,
        budget: RetryBudget,
        tracker: DispatchTracker,
        metrics: RouterMetrics,
        signer: GatewaySigner | None = None,
    ) -> None:
        self._signer = signer if signer is not None else GatewaySigner({})
        # One O(1) keep-alive pool per gateway (common.upstream): httpx's pool scans every pooled
        # connection per request, which made a router in front of 2,000 streams collapse.
        self._upstreams = upstreams
        self._addresses: dict[str, GatewayAddress] = {}
        self._cfg = cfg
        self._health = health
        self._budget = budget
        self._tracker = tracker
        self._metrics = metrics
        self._inflight_children: dict[str, Gauge] = {}

    def _address(self, url: str) -> GatewayAddress:
        addr = self._addresses.get(url)
        if addr is None:
            if len(self._addresses) > 4096:  # gateway URLs change rarely; bound the cache anyway
                self._addresses.clear()
            addr = self._addresses[url] = parse_gateway_url(url)
        return addr

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
        addr = self._address(cand.cluster.gateway_url)
        self._tracker.on_dispatch(cid, cand.cluster.seq)
        self._inflight(cid).inc()
        started = time.perf_counter()
        resp: Response | None = None
        handed_over = False
        cfg = self._cfg
        try:
            with data_path_span(tracer, "router.forward") as span:
                span.set_attribute("fleetgate.cluster", cid)
                span.set_attribute("fleetgate.traffic_class", req.traffic_class)
                try:
                    sent = with_trace_context(req.headers) if span.is_recording() else req.headers
                    sent = self._signer.sign(cid, "POST", req.path, req.body, sent)  # gateway auth
                    pool = self._upstreams.get(addr.host, addr.port, addr.tls)
                    resp = await pool.request(
                        b"POST",
                        addr.target(req.path),
                        [(k.encode("latin-1"), v.encode("latin-1")) for k, v in sent.items()],
                        req.body,
                        head_timeout_s=cfg.first_byte_timeout_s,
                        ack_timeout_s=cfg.ack_timeout_s or None,
                    )
                    deadline = started + cfg.first_byte_timeout_s
                    status = resp.status
                    span.set_attribute("http.response.status_code", status)
                    if status in (401, 403):  # the gateway refused our credential: a failing cluster
                        await resp.read(_remaining(deadline))
                        self._fail(cid)
                        raise _Retryable(f"HTTP {status}", 502, GATEWAY_REFUSED, _JSON_HEADERS)
                    headers = downstream_headers(
                        (k.decode("latin-1"), v.decode("latin-1")) for k, v in resp.headers
                    )
                    if retry_elsewhere(status):  # see global_router/cluster_failure.py
                        body = await resp.read(_remaining(deadline))
                        if counts_as_cluster_failure(status):
                            self._fail(cid)
                        raise _Retryable(f"HTTP {status}", status, body, headers)
                    if not req.stream or status >= 400:
                        body = await resp.read(cfg.read_timeout_s)
                        self._metrics.ttfb_seconds.labels(cid).observe(time.perf_counter() - started)
                        self._health.record_success(cid)
                        delivery = Delivery(cid, status, headers, 0, body=body)
                        if status < 400:
                            delivery.usage.read_body(body)
                            delivery.used_tokens = delivery.usage.total(req.prompt_tokens)
                        return delivery
                    first = await resp.next_chunk(_remaining(deadline))
                    self._metrics.ttfb_seconds.labels(cid).observe(time.perf_counter() - started)
                    if not first:
                        self._fail(cid)
                        raise _Retryable("empty stream")
                    delivery = Delivery(cid, status, headers, 0, first_chunk=first, response=resp)
                    delivery.usage.feed(first)
                    handed_over = True
                    return delivery
                except UpstreamError as exc:
                    # unacknowledged: the data path is black-holed, eject now (failover.py)
                    self._fail(cid, eject=isinstance(exc, UpstreamTimeout) and exc.phase == "ack")
                    span.record_exception(exc)
                    raise _Retryable(f"{exc.kind}: {exc}") from None
        finally:
            if not handed_over:
                if resp is not None:
                    resp.release()
                self._tracker.on_done(cid)
                self._inflight(cid).dec()

    def _inflight(self, cid: str) -> Gauge:
        """The cluster's in-flight gauge child, looked up once (`labels()` costs ~3 µs a call)."""
        child = self._inflight_children.get(cid)
        if child is None:
            child = self._inflight_children[cid] = self._metrics.inflight.labels(cid)
        return child

    def _fail(self, cid: str, *, eject: bool = False) -> None:
        if self._health.record_failure(cid, eject=eject):
            self._metrics.ejections.labels(cid).inc()

    async def relay(self, d: Delivery, prompt_tokens: int, out: BodySink) -> None:
        """The stream's bytes to the client, first chunk included (its tokens were counted when it
        came); a break ends it with an SSE error event."""
        assert d.response is not None
        await write_to(out, d.first_chunk)
        try:
            await d.response.relay(Observed(out, d.usage.feed), self._cfg.read_timeout_s)
        except UpstreamError as exc:
            self._fail(d.cluster_id)
            d.outcome = STREAM_BROKEN
            log.warning("stream from cluster %s broke after bytes were sent: %s", d.cluster_id, exc)
            await out.put(
                sse_error_tail(
                    f"The upstream cluster stopped responding mid-stream ({exc.kind}); the response is incomplete."
                )
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
            d.response.release()
            self._tracker.on_done(d.cluster_id)
            self._inflight(d.cluster_id).dec()


def _remaining(deadline: float) -> float:
    return max(0.001, deadline - time.perf_counter())
