"""Send a scheduled request to its pod and stream the answer back, failing over before the first byte.

Nothing admitted is lost: while no byte has reached the client, a pod that refuses the connection,
times out connecting or drops it without answering is skipped for the next-ranked pod (up to
`proxy.maxAttempts`), and one 5xx/429 answer is retried on another pod; a pod that refused a
connection is tried last for a couple of seconds, until the scraper catches up. Once bytes flow, the
stream is passed through chunk by chunk (`aiter_raw`, no buffering or re-encoding).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

import httpx

from cluster_gateway.observability import (
    CANCELLED,
    FAILED,
    OK,
    UPSTREAM_ERROR,
    GatewayMetrics,
    tracer,
)
from cluster_gateway.pool import PodState
from cluster_gateway.proxy.dispatch import Dispatcher, Pick
from cluster_gateway.proxy.headers import downstream_response_headers
from cluster_gateway.proxy.upstream import UpstreamClients
from common.errors import OpenAIError
from common.telemetry import inject_traceparent

log = logging.getLogger("fleetgate.gateway.proxy")

Send = Callable[[MutableMapping[str, Any]], Awaitable[None]]

# Failures that prove the pod never answered this request: safe to send it elsewhere.
_NOT_ANSWERED = (
    httpx.ConnectError,
    httpx.ConnectTimeout,
    httpx.PoolTimeout,
    httpx.RemoteProtocolError,
    httpx.ReadError,
    httpx.WriteError,
)


class NoPodAnswered(OpenAIError):
    """Every attempt failed before any byte reached the client (503)."""


UNREACHABLE_HOLD_S = 2.0


def _retryable_status(status: int) -> bool:
    return status >= 500 or status == 429


class Forwarder:
    def __init__(
        self,
        clients: UpstreamClients,
        dispatcher: Dispatcher,
        metrics: GatewayMetrics,
        *,
        max_attempts: int,
        debug_headers: bool = False,
    ) -> None:
        self.clients = clients
        self.dispatcher = dispatcher
        self.metrics = metrics
        self.max_attempts = max_attempts
        self.debug_headers = debug_headers
        # Pods that just failed to connect, until when: tried last meanwhile. A dead pod IP can cost
        # a full connect timeout per request; the scraper needs a few intervals to mark it stale.
        self._unreachable: dict[str, float] = {}

    def _ranked(self, pods: list[PodState]) -> list[PodState]:
        if not self._unreachable:
            return pods
        now = time.monotonic()
        for name, until in list(self._unreachable.items()):
            if until <= now:
                del self._unreachable[name]
        if not self._unreachable:
            return pods
        return sorted(pods, key=lambda p: p.name in self._unreachable)  # stable: order kept otherwise

    async def forward(self, pick: Pick, path: str, body: bytes, headers: dict[str, str], send: Send) -> None:
        """Deliver the request to the first pod that answers; raises OpenAIError if none does."""
        pods = self._ranked(pick.pods)
        attempts = min(self.max_attempts, len(pods))
        status_retry_left = 1
        last_error = "no pod was tried"
        for i in range(attempts):
            pod = pods[i]
            has_next = i + 1 < attempts
            self.dispatcher.dispatched(pick, pod)
            outcome = FAILED
            committed = False
            try:
                with tracer.start_as_current_span("gateway.forward") as span:
                    span.set_attribute("fleetgate.pod", pod.name)
                    span.set_attribute("fleetgate.attempt", i + 1)
                    t0 = time.monotonic()
                    attempt_headers = dict(headers)
                    inject_traceparent(attempt_headers)  # the pod's parent span is this attempt
                    client = self.clients.for_pod(pod)
                    req = client.build_request(
                        "POST", pod.endpoint.url + path, content=body, headers=attempt_headers
                    )
                    try:
                        resp = await client.send(req, stream=True)
                    except _NOT_ANSWERED as exc:
                        last_error = f"{pod.name}: {type(exc).__name__}"
                        if isinstance(exc, httpx.ConnectError | httpx.ConnectTimeout):
                            self._unreachable[pod.name] = time.monotonic() + UNREACHABLE_HOLD_S
                        span.set_attribute("fleetgate.error", last_error)
                        self.metrics.retries.labels("connect").inc()
                        log.info("pod %s did not answer (%s); trying the next pod", pod.name, exc)
                        continue
                    try:
                        span.set_attribute("http.status_code", resp.status_code)
                        if _retryable_status(resp.status_code) and has_next and status_retry_left > 0:
                            status_retry_left -= 1
                            last_error = f"{pod.name}: HTTP {resp.status_code}"
                            self.metrics.retries.labels("status").inc()
                            log.info(
                                "pod %s answered %d; retrying on another pod", pod.name, resp.status_code
                            )
                            continue
                        committed = True
                        outcome = await self._relay(resp, pod, send, t0)
                        return
                    finally:
                        await resp.aclose()
            except asyncio.CancelledError:
                outcome, committed = CANCELLED, True
                raise
            finally:
                self.dispatcher.finished(pod)
                if committed or not has_next:
                    self.metrics.request_done(pod.name, pick.profile, outcome)
        raise NoPodAnswered(
            503,
            f"No model server could take the request after {attempts} attempt(s) ({last_error}).",
            code="upstream_unavailable",
        )

    async def _relay(self, resp: httpx.Response, pod: PodState, send: Send, t0: float) -> str:
        """Stream the pod's response to the client; returns the outcome label."""
        await send(
            {
                "type": "http.response.start",
                "status": resp.status_code,
                "headers": downstream_response_headers(
                    resp.headers.raw, pod.name if self.debug_headers else None
                ),
            }
        )
        first = True
        is_sse = resp.headers.get("content-type", "").startswith("text/event-stream")
        try:
            async for chunk in resp.aiter_raw():
                if first:
                    self.metrics.ttft.labels(pod.name).observe(time.monotonic() - t0)
                    first = False
                await send({"type": "http.response.body", "body": chunk, "more_body": True})
        except httpx.TransportError as exc:
            # Bytes already reached the client: no retry possible. Close the stream visibly.
            log.warning("stream from pod %s broke after the first byte: %s", pod.name, exc)
            if not is_sse:
                raise
            err = OpenAIError(
                502, f"The model server stream broke: {type(exc).__name__}", code="upstream_error"
            )
            payload = b"data: " + err.body_bytes() + b"\n\ndata: [DONE]\n\n"
            await send({"type": "http.response.body", "body": payload, "more_body": False})
            return FAILED
        await send({"type": "http.response.body", "body": b"", "more_body": False})
        return OK if resp.status_code < 400 else UPSTREAM_ERROR
