"""common.http: one hop-by-hop set both tiers honour, one JSON answer, and the tier header contract
(what the router writes is what the gateway's scheduler reads)."""

from __future__ import annotations

from typing import Any

from cluster_gateway.request_path.headers import (
    client_headers,
    downstream_response_headers,
    upstream_request_headers,
)
from cluster_gateway.scheduling.types import LLMRequest
from common.config.router import Tenant
from common.errors import OpenAIError
from common.http import (
    HOP_BY_HOP,
    PROFILE_HEADER,
    ROUTING_HINT_HEADERS,
    SHEDDABLE_HEADER,
    Message,
    send_error,
    send_json,
)
from common.openai_request import CHAT_PATH, parse_request
from global_router.forward import downstream_headers
from global_router.headers import decode_headers, upstream_headers

TENANT = Tenant(name="acme", api_key_sha256=["0" * 64], sheddable=True)


def _raw(headers: dict[str, str]) -> list[tuple[bytes, bytes]]:
    return [(k.encode(), v.encode()) for k, v in headers.items()]


def test_hop_by_hop_follows_rfc_9110_and_drops_expect() -> None:
    rfc_9110_7_6_1 = {"connection", "proxy-connection", "keep-alive", "te", "transfer-encoding", "upgrade"}
    assert rfc_9110_7_6_1 <= HOP_BY_HOP
    assert {"trailer", "proxy-authenticate", "proxy-authorization", "expect"} <= HOP_BY_HOP


def test_no_hop_by_hop_header_crosses_either_tier_in_either_direction() -> None:
    sent = {name: "x" for name in HOP_BY_HOP} | {"x-app-header": "kept"}

    tier1_request = upstream_request_headers(client_headers(_raw(sent)))
    tier2_request = upstream_headers(decode_headers(_raw(sent)), TENANT, "latency")
    tier1_response = {k.decode() for k, _ in downstream_response_headers(_raw(sent), None)}
    tier2_response = downstream_headers(sent.items())

    for crossed in (set(tier1_request), set(tier2_request), tier1_response, set(tier2_response)):
        assert crossed.isdisjoint(HOP_BY_HOP), crossed & HOP_BY_HOP
        assert "x-app-header" in crossed


def test_what_tier2_sets_reaches_tier1s_scheduler() -> None:
    client = {"x-fleetgate-profile": "client-chosen", "x-fleetgate-sheddable": "false"}
    to_gateway = upstream_headers(decode_headers(_raw(client)), TENANT, "batch")
    assert to_gateway[PROFILE_HEADER] == "batch" and to_gateway[SHEDDABLE_HEADER] == "true"

    at_gateway = client_headers(_raw(to_gateway))
    assert set(at_gateway) >= ROUTING_HINT_HEADERS
    parsed = parse_request(b'{"model": "m", "messages": [{"role": "user", "content": "hi"}]}', CHAT_PATH)
    req = LLMRequest.from_parsed(parsed, at_gateway)
    assert (req.profile, req.sheddable) == ("batch", True)


async def test_send_json_answers_in_one_complete_body() -> None:
    sent: list[Message] = []

    async def send(msg: Message) -> None:
        sent.append(msg)

    await send_json(send, 201, b'{"ok":true}', {"x-extra": "1"})
    start, body = sent
    assert start == {
        "type": "http.response.start",
        "status": 201,
        "headers": [(b"content-type", b"application/json"), (b"x-extra", b"1"), (b"content-length", b"11")],
    }
    assert body == {"type": "http.response.body", "body": b'{"ok":true}', "more_body": False}


async def test_send_error_puts_the_errors_own_headers_last() -> None:
    sent: list[dict[str, Any]] = []

    async def send(msg: Message) -> None:
        sent.append(dict(msg))

    err = OpenAIError(429, "slow down", code="rate_limited", headers={"retry-after": "2"})
    await send_error(send, err, {"retry-after": "9", "x-ratelimit-remaining": "0"})
    headers = dict(sent[0]["headers"])
    assert sent[0]["status"] == 429
    assert headers[b"retry-after"] == b"2" and headers[b"x-ratelimit-remaining"] == b"0"
    assert sent[1]["body"] == err.body_bytes()
