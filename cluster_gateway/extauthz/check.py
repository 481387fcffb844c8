"""The ext_authz check: Envoy asks, with the client's request and body, which pod should serve it.

Why ext_authz next to ext_proc: the ext_proc picker costs one gRPC stream per request (its setup,
four messages and its close are ~80% of the picker's CPU under grpc.aio), while Envoy's ext_authz
filter with an HTTP service asks over a pooled keep-alive HTTP/1.1 connection: one request, one
bodyless answer, served by the same httptools/uvloop server and worker processes as the embedded
proxy (docs/envoy-picker.md has the measurements). ext_proc stays the Gateway API Inference
Extension's protocol, for gateways that speak only it.

The check answers 200 with the pod in `x-gateway-destination-endpoint` (Envoy's ORIGINAL_DST or
override_host cluster routes on it) and the pick's id in `x-fleetgate-pick`; Envoy copies both onto
the upstream request (`allowed_upstream_headers` override a client's copies) and removes the
internal headers the check names in `x-envoy-auth-headers-to-remove`. Any other answer is a denial
that Envoy relays to the client as is: the OpenAI-format 4xx/429/503 errors of the embedded proxy.
The pod's in-flight slot stays open in the ledger until Envoy's access log reports the end.
"""

from __future__ import annotations

import asyncio
import logging

from cluster_gateway.auth import GatewayAuthenticator
from cluster_gateway.envoy_front.contract import CHECK_PREFIX, ENDPOINTS_HEADER, PICK_HEADER
from cluster_gateway.envoy_front.token import ENVOY_TOKEN_HEADER, EnvoyToken
from cluster_gateway.extauthz.ledger import OpenPick, PickLedger
from cluster_gateway.observability import CANCELLED, OK, REJECTED, SHED, UPSTREAM_ERROR, GatewayMetrics
from cluster_gateway.request_path.dispatch import Dispatcher
from cluster_gateway.request_path.headers import DESTINATION_HEADER, client_headers
from cluster_gateway.request_path.outliers import OutlierDetector
from common.asgi import ClientGone, read_body, run_until_disconnect
from common.errors import OpenAIError
from common.fast_route import Answer, error_answer
from common.http import ASGIApp, RawHeaders, Receive, Scope, Send, send_body, send_error
from common.openai_request import CHAT_PATH, COMPLETIONS_PATH, MAX_JSON_DEPTH, parse_request

log = logging.getLogger("fleetgate.gateway.extauthz")

_INFERENCE_PATHS = frozenset({COMPLETIONS_PATH, CHAT_PATH})
_REMOVE_HEADER = b"x-envoy-auth-headers-to-remove"
_TOKEN_HEADER = ENVOY_TOKEN_HEADER.encode()
_ENDPOINTS = ENDPOINTS_HEADER.encode()
_DESTINATION = DESTINATION_HEADER.encode()
_PICK = PICK_HEADER.encode()
_SET_BY_CHECK = frozenset({_DESTINATION, _PICK})


class PickCheck:
    """ASGI handler for `POST {CHECK_PREFIX}/v1/...`; `release()` is the access log's way back."""

    def __init__(
        self,
        dispatcher: Dispatcher,
        outliers: OutlierDetector,
        metrics: GatewayMetrics,
        ledger: PickLedger,
        *,
        max_body_bytes: int,
        max_json_depth: int = MAX_JSON_DEPTH,
        auth: GatewayAuthenticator,
        envoy_token: EnvoyToken | None = None,
        fallbacks: int = 2,
    ) -> None:
        self.dispatcher = dispatcher
        self.outliers = outliers
        self.metrics = metrics
        self.ledger = ledger
        self.max_body = max_body_bytes
        self.max_depth = max_json_depth
        self.auth = auth
        self.fallbacks = fallbacks
        self.envoy_token = envoy_token or EnvoyToken([])

    def routes(self) -> dict[tuple[str, str], ASGIApp]:
        """The check's paths on the gateway's HTTP server (the embedded proxy's route table)."""
        return {("POST", CHECK_PREFIX + path): self for path in sorted(_INFERENCE_PATHS)}

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        """A check on a connection that uvicorn serves (its first request was not a check)."""
        try:
            body = await read_body(
                receive, client_headers(scope["headers"]).get("content-length"), self.max_body
            )
        except ClientGone:
            self.metrics.request_done("-", "-", CANCELLED)
            return
        except OpenAIError as err:
            self.metrics.request_done("-", "-", REJECTED)
            await send_error(send, err)
            return
        answers: list[Answer] = []

        async def work() -> None:
            answers.append(await self.answer(scope["method"], scope["path"], scope["headers"], body))

        if await run_until_disconnect(work(), scope, receive, lambda: bool(answers)):
            return  # Envoy gave up on the check (its timeout): no pick, no slot
        answer = answers[0]
        try:
            await send_body(send, answer.status, answer.body, answer.headers)
        except OSError:
            if answer.undelivered is not None:
                answer.undelivered()
            raise

    async def answer(self, method: str, path: str, raw_headers: RawHeaders, body: bytes) -> Answer:
        """The check itself, transport-free: `common/fast_route.py` calls it on Envoy's connections.

        A 200 carries the pick; any other answer is the OpenAI-format denial Envoy relays. Cancelled
        (Envoy gave up) before the pick: no slot is taken.
        """
        path = path.removeprefix(CHECK_PREFIX)
        if method != "POST" or path not in _INFERENCE_PATHS:
            if path in _INFERENCE_PATHS:
                return self._deny(OpenAIError(405, f"Method {method} not allowed on {path}"), REJECTED)
            return self._deny(
                OpenAIError(404, f"Unknown path {path}", code="unknown_url", type="invalid_request_error"),
                REJECTED,
            )
        if self.envoy_token.required and not self._from_envoy(raw_headers):
            return self._deny(
                OpenAIError(403, "Checks are for the gateway's Envoy", code="forbidden"), REJECTED
            )
        dropped: list[bytes] = []
        try:
            headers = client_headers(raw_headers, dropped)
            self.auth.verify_asgi("POST", path, raw_headers, body)
            parsed = parse_request(body, path, self.max_depth)
            chosen = await self.dispatcher.pick_in_trace(parsed, headers)
        except OpenAIError as err:
            return self._deny(err, SHED if err.status == 429 else REJECTED)
        except asyncio.CancelledError:
            self.metrics.request_done("-", "-", CANCELLED)
            raise
        ranked = self.outliers.rank(chosen.pods)
        pod = ranked[0]
        self.dispatcher.dispatched(chosen, pod)  # from here the slot is the ledger's
        pick_id = self.ledger.open(chosen, pod)
        out = [
            (_DESTINATION, pod.endpoint.hostport.encode()),
            (_PICK, pick_id.encode()),
        ]
        if self.fallbacks and len(ranked) > 1:
            listed = ",".join(p.endpoint.hostport for p in ranked[: 1 + self.fallbacks])
            out.append((_ENDPOINTS, listed.encode()))
        # The client's copies of the two headers set above are overwritten by Envoy; naming them here
        # too would remove the pick itself (Envoy applies removals after the set).
        internal = {k for k in dropped if k not in _SET_BY_CHECK and k != _TOKEN_HEADER}
        if internal:
            out.append((_REMOVE_HEADER, b",".join(sorted(internal))))
        return Answer(200, out, undelivered=lambda: self._undelivered(pick_id))

    def _deny(self, err: OpenAIError, outcome: str) -> Answer:
        self.metrics.request_done("-", "-", outcome)
        return error_answer(err)

    def _undelivered(self, pick_id: str) -> None:
        """Envoy left before the answer reached it: the request never goes to the pod."""
        entry = self.ledger.close(pick_id)
        if entry is not None:
            self._finish(entry, CANCELLED)

    def _from_envoy(self, raw_headers: RawHeaders) -> bool:
        return self.envoy_token.accepts(next((v for k, v in raw_headers if k == _TOKEN_HEADER), None))

    def release(self, pick_id: str, status: int) -> bool:
        """Envoy logged the end of this pick's request with `status` (0: no response, e.g. reset)."""
        entry = self.ledger.close(pick_id)
        if entry is None:
            return False
        self._finish(entry, OK if 0 < status < 400 else UPSTREAM_ERROR if status else CANCELLED)
        return True

    def expire(self) -> int:
        """Release the picks whose log entry never came (`extAuthz.slotTtlS`)."""
        stale = self.ledger.expire()
        for entry in stale:
            self._finish(entry, CANCELLED)
        if stale:
            log.warning(
                "released %d pod slots whose end Envoy never logged within %.0f s (access log stream down?)",
                len(stale),
                self.ledger.ttl_s,
            )
        return len(stale)

    def _finish(self, entry: OpenPick, outcome: str) -> None:
        self.dispatcher.finished(entry.pod)
        self.dispatcher.completed(entry.pick, entry.pod, outcome)
        self.metrics.request_done(entry.pod.name, entry.pick.profile, outcome)
