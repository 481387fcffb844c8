"""The Envoy pieces of the ext_authz picker: the filter, the check cluster, the `/v1/models` route.

`bootstrap.py` composes them into a bootstrap when asked for `picker="ext_authz"`.
What the filter sends is all the picker needs and nothing more: the client's headers (its credential,
`traceparent`, the routing hints) and the whole body (`with_request_body`, never partial: a pick
needs the model and the prompt), to `{CHECK_PREFIX}` + the request's path on the gateway's HTTP port.
A check that fails or times out is a 503 (`status_on_error`; Envoy's default would be a 403), which
the bootstrap's local-reply mapper turns into OpenAI JSON.
"""

from __future__ import annotations

from typing import Any

from cluster_gateway.envoy_front.contract import CHECK_PREFIX, ENDPOINTS_HEADER, PICK_HEADER
from cluster_gateway.envoy_front.token import ENVOY_TOKEN_HEADER
from cluster_gateway.request_path.headers import DESTINATION_HEADER

CHECK_CLUSTER = "fleetgate-check"
# The same port for `GET /v1/models`, in a cluster of its own: its connections then never carry a
# check, and the check connections stay on the gateway's lean check path (common/fast_route.py).
GATEWAY_CLUSTER = "fleetgate-gateway"
# The check's ranked list (`x-fleetgate-endpoints: ip:port,ip:port`) becomes dynamic metadata of the
# ext_authz filter, where an override_host cluster finds the fallbacks for its retries.
ENDPOINTS_METADATA = {"key": "envoy.filters.http.ext_authz", "path": [{"key": ENDPOINTS_HEADER}]}


def ext_authz_filter(
    *, max_body_bytes: int, check_timeout_s: float, envoy_token: str | None = None
) -> dict[str, Any]:
    """`envoy_token`: sent with every check (`extProc.envoyTokenSha256` holds its digest); Envoy
    overwrites a client's header of that name."""
    request: dict[str, Any] = {}
    if envoy_token is not None:
        request["headers_to_add"] = [{"key": ENVOY_TOKEN_HEADER, "value": envoy_token}]
    return {
        "name": "envoy.filters.http.ext_authz",
        "typed_config": {
            "@type": "type.googleapis.com/envoy.extensions.filters.http.ext_authz.v3.ExtAuthz",
            "transport_api_version": "V3",
            "failure_mode_allow": False,
            # every client header (the filter-level field; `authorization_request.allowed_headers`
            # is deprecated and logs a warning at each start)
            "allowed_headers": {"patterns": [{"safe_regex": {"regex": ".*"}}]},
            "status_on_error": {"code": 503},
            "with_request_body": {"max_request_bytes": max_body_bytes, "allow_partial_message": False},
            "http_service": {
                "server_uri": {
                    "uri": f"http://{CHECK_CLUSTER}",
                    "cluster": CHECK_CLUSTER,
                    # the check waits in the gateway's admission queue when every pod is busy
                    "timeout": f"{check_timeout_s}s",
                },
                "path_prefix": CHECK_PREFIX,
                "authorization_request": request,
                "authorization_response": {
                    "dynamic_metadata_from_headers": {"patterns": [{"exact": ENDPOINTS_HEADER}]},
                    # set, not appended: a client's own copies of these are overwritten
                    "allowed_upstream_headers": {
                        "patterns": [{"exact": DESTINATION_HEADER}, {"exact": PICK_HEADER}]
                    },
                },
            },
        },
    }


def models_route(upstream_timeout_s: float) -> dict[str, Any]:
    """`GET /v1/models` goes to the gateway itself (it answers from the pool, checking the client's
    credential), without a check: an allowed check would need a pod to route to."""
    return {
        "match": {"path": "/v1/models"},
        "route": {"cluster": GATEWAY_CLUSTER, "timeout": f"{upstream_timeout_s}s"},
        "typed_per_filter_config": {
            "envoy.filters.http.ext_authz": {
                "@type": "type.googleapis.com/envoy.extensions.filters.http.ext_authz.v3.ExtAuthzPerRoute",
                "disabled": True,
            }
        },
    }


def check_clusters(host: str, port: int, breakers: dict[str, Any]) -> list[dict[str, Any]]:
    """The gateway's HTTP port, HTTP/1.1 keep-alive, as two clusters (checks; the models route): the
    kernel spreads Envoy's connections over the serving processes (SO_REUSEPORT)."""
    return [
        {
            "name": name,
            "type": "STATIC",
            "connect_timeout": "2s",
            "circuit_breakers": breakers,
            "load_assignment": {
                "cluster_name": name,
                "endpoints": [
                    {
                        "lb_endpoints": [
                            {
                                "endpoint": {
                                    "address": {"socket_address": {"address": host, "port_value": port}}
                                }
                            }
                        ]
                    }
                ],
            },
        }
        for name in (CHECK_CLUSTER, GATEWAY_CLUSTER)
    ]
