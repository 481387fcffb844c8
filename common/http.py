"""The HTTP vocabulary every Fleetgate server shares: ASGI types, JSON answers, hop-by-hop headers and
the header contract between the two tiers.

Both tiers (and the model-server simulator) are bare ASGI apps, and both forward requests to a next
hop, so the type aliases, the one way a JSON body is answered, which headers never cross a hop, and
the names Tier 2 sets for Tier 1 to read are written once here. Two copies of a header list drift
apart (they did: `proxy-connection` and `expect` were dropped by one tier and not the other), and a
header one tier writes under a name the other no longer reads fails silently.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterable, Mapping, MutableMapping
from typing import Any

from common.errors import OpenAIError

# --- ASGI (https://asgi.readthedocs.io/en/latest/specs/main.html) -------------------------------

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]
RawHeaders = list[tuple[bytes, bytes]]

_JSON_TYPE = (b"content-type", b"application/json")


async def send_body(
    send: Send, status: int, body: bytes, headers: Iterable[tuple[bytes, bytes]] = ()
) -> None:
    """Answer with a complete body: `headers` as given, then its content-length."""
    hdrs = [*headers, (b"content-length", str(len(body)).encode())]
    await send({"type": "http.response.start", "status": status, "headers": hdrs})
    await send({"type": "http.response.body", "body": body, "more_body": False})


async def send_json(send: Send, status: int, body: bytes, headers: Mapping[str, str] | None = None) -> None:
    """Answer with an encoded JSON body: content-type, then `headers`, then content-length."""
    hdrs = [_JSON_TYPE]
    if headers:
        hdrs += [(k.encode("latin-1"), v.encode("latin-1")) for k, v in headers.items()]
    await send_body(send, status, body, hdrs)


async def send_error(send: Send, err: OpenAIError, headers: Mapping[str, str] | None = None) -> None:
    """Answer with an OpenAI-format error; `headers` go out before the error's own (which win)."""
    await send_json(
        send, err.status, err.body_bytes(), {**headers, **err.headers} if headers else err.headers
    )


# --- Hop-by-hop headers ----------------------------------------------------------------------------

HOP_BY_HOP = frozenset(
    {
        # RFC 9110 §7.6.1: connection-specific fields a proxy removes before forwarding
        "connection",
        "keep-alive",
        "proxy-connection",
        "te",
        "transfer-encoding",
        "upgrade",
        # RFC 2616 §13.5.1's list, still per hop: `trailer` names trailers of this hop's framing,
        # the proxy-* pair authenticates to the proxy itself (RFC 9110 §11.7)
        "trailer",
        "proxy-authenticate",
        "proxy-authorization",
        # Not connection-specific in the RFC, but its only defined expectation, `100-continue`, is a
        # per-hop handshake: the server in front of us already answered it (uvicorn sends the 100
        # when the body is read), and both tiers read the whole body before they forward, so the
        # next hop must not be asked for one on the client's behalf (the router asks its own hop:
        # `ack_timeout_s` in common/upstream/pool.py).
        "expect",
    }
)
"""Headers that never cross a Fleetgate hop, in either direction (lower-case names). Each caller adds
the fields it sets itself (`host`, `content-length`, `server`, `date`)."""

# --- The tier contract: what Tier 2 (global router) sets for Tier 1 (cluster gateway) ----------------
# The HMAC headers that authenticate the hop are in `common.gateway_auth`.

PROFILE_HEADER = "x-fleetgate-profile"
"""The scheduling profile: Tier 2 sets it from the tenant's config, Tier 1 schedules by it."""
SHEDDABLE_HEADER = "x-fleetgate-sheddable"
"""`true`: Tier 1 may refuse the request (429) instead of queueing it when its pods are saturated."""
OBJECTIVE_HEADER = "x-gateway-inference-objective"
"""The Gateway API Inference Extension's name for the profile; Tier 1 reads it when the profile is absent."""
FAIRNESS_HEADER = "x-gateway-inference-fairness-id"
"""The Inference Extension's fairness id: Tier 2 sets the tenant's name."""
ROUTING_HINT_HEADERS = frozenset({PROFILE_HEADER, SHEDDABLE_HEADER})
"""The only `x-fleetgate-*` request headers Tier 1 accepts from its caller; every other is internal."""
INTERNAL_PREFIX = "x-fleetgate-"
"""Headers under this prefix are Fleetgate's own: a client's are dropped, a next hop's not passed back."""
