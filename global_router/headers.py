"""Which client headers reach a cluster gateway, and which the router sets itself.

A client must not steer routing: every `x-fleetgate-*` and `x-gateway-*` header it sends (profile,
sheddable, destination endpoint, objective, cluster hints) is dropped, and the router sets the ones
it owns from the tenant's config. The client's API key stays at the router.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from opentelemetry.propagate import inject

from common.config.router import Tenant
from common.http import FAIRNESS_HEADER, HOP_BY_HOP, INTERNAL_PREFIX, PROFILE_HEADER, SHEDDABLE_HEADER

CLIENT_REGION_HEADER = "x-fleetgate-client-region"  # read by the router, never forwarded

_DROP = HOP_BY_HOP | {
    "authorization",
    "cookie",
    "host",
    "content-length",
    "accept-encoding",  # the router reads usage from the body: ask for it uncompressed
}


def decode_headers(raw: Iterable[tuple[bytes, bytes]]) -> dict[str, str]:
    out: dict[str, str] = {}
    for k, v in raw:
        name = k.decode("latin-1").lower()
        value = v.decode("latin-1")
        out[name] = f"{out[name]}, {value}" if name in out else value
    return out


def is_internal(name: str) -> bool:
    return name.startswith(INTERNAL_PREFIX) or name.startswith("x-gateway-")


def upstream_headers(client: Mapping[str, str], tenant: Tenant, profile: str) -> dict[str, str]:
    """Headers for the gateway: the client's minus credentials, hop-by-hop and internal ones,
    plus the router's routing hints (`with_trace_context` adds the trace per attempt)."""
    out = {k: v for k, v in client.items() if k not in _DROP and not is_internal(k)}
    out["accept-encoding"] = "identity"
    out[PROFILE_HEADER] = profile
    if tenant.sheddable:
        out[SHEDDABLE_HEADER] = "true"
    out[FAIRNESS_HEADER] = tenant.name
    return out


def with_trace_context(headers: dict[str, str]) -> dict[str, str]:
    """A copy carrying the current span as the gateway's parent (the client's context without an SDK)."""
    ours: dict[str, str] = {}
    inject(ours)
    if "traceparent" not in ours:
        return headers
    out = {k: v for k, v in headers.items() if k != "tracestate"}
    out.update(ours)
    return out
