"""Which headers cross the gateway, in each direction.

A client must never steer routing: the Envoy destination header and every `x-fleetgate-*` header
except the two documented request hints (`common.http.ROUTING_HINT_HEADERS`, what Tier 2 sets) are
dropped before scheduling and before forwarding.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from common.http import HOP_BY_HOP, INTERNAL_PREFIX, ROUTING_HINT_HEADERS

DESTINATION_HEADER = "x-gateway-destination-endpoint"
POD_HEADER = "x-fleetgate-pod"

_REQUEST_DROP = HOP_BY_HOP | {"host", "content-length", DESTINATION_HEADER}
_RESPONSE_DROP = HOP_BY_HOP | {"server", "date"}


def is_internal(name: str) -> bool:
    """True for headers only Fleetgate itself may set (lower-case name)."""
    if name == DESTINATION_HEADER:
        return True
    return name.startswith(INTERNAL_PREFIX) and name not in ROUTING_HINT_HEADERS


def client_headers(raw: Iterable[tuple[bytes, bytes]], dropped: list[bytes] | None = None) -> dict[str, str]:
    """Decode ASGI request headers to a lower-case dict without internal routing headers.

    Repeated headers are joined with ", " (RFC 9110 §5.3), which is what the scheduler reads.
    `dropped` collects the raw names of the internal headers left out, for a caller that must name
    them (the ext_authz check tells Envoy to remove them), so that nobody decodes the headers twice.
    """
    out: dict[str, str] = {}
    for k, v in raw:
        name = k.decode("latin-1").lower()
        if name == DESTINATION_HEADER or (
            name.startswith(INTERNAL_PREFIX) and name not in ROUTING_HINT_HEADERS
        ):  # is_internal, inlined: this runs for every header of every request
            if dropped is not None:
                dropped.append(k)
            continue
        value = v.decode("latin-1")
        out[name] = f"{out[name]}, {value}" if name in out else value
    return out


def upstream_request_headers(headers: Mapping[str, str]) -> dict[str, str]:
    """Headers to send to the pod: the client's, minus hop-by-hop and anything internal."""
    return {k: v for k, v in headers.items() if k not in _REQUEST_DROP and not is_internal(k)}


def downstream_response_headers(
    headers: Iterable[tuple[bytes, bytes]], pod_name: str | None
) -> list[tuple[bytes, bytes]]:
    """The pod's response headers for the client; `x-fleetgate-pod` only when debug headers are on."""
    out = [
        (k, v)
        for k, v in headers
        if (n := k.decode("latin-1").lower()) not in _RESPONSE_DROP and not n.startswith(INTERNAL_PREFIX)
    ]
    if pod_name is not None:
        out.append((POD_HEADER.encode(), pod_name.encode()))
    return out
