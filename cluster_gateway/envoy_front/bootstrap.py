"""An Envoy bootstrap that puts the Fleetgate picker in front of a pool (tests, bench, docs).

The shape follows the Gateway API Inference Extension data path: the ext_proc filter sees the
request headers and the body, and an ORIGINAL_DST cluster sends the request to whatever
`x-gateway-destination-endpoint` the picker set. What crosses the ext_proc stream is kept to the
least that routes a request (each message costs the Python picker more than the pick itself):
  * `body_mode="STREAMED"` (default) with `send_body_without_waiting_for_header_response`: headers
    and body go out back to back, the picker answers the headers with the pick and each body chunk
    with a bare CONTINUE; Envoy keeps the body. FULL_DUPLEX_STREAMED (the Inference Extension's
    convention) makes the picker stream the body back; BUFFERED costs a second round trip.
  * `response_headers=False` (default): the response phase is skipped entirely. Envoy closes the
    ext_proc stream when the HTTP request is destroyed, after the whole response (streams too),
    and the picker releases the pod's in-flight slot on that close. `True` sends the response
    headers (status for the picker's outlier detection and TTFT metric; the gateway's
    `extProc.responseHeaders` must then be true too) and trailers.
Response bodies are never sent to the picker (no per-chunk round trip on SSE streams).
"""

from __future__ import annotations

from typing import Any, Literal

from cluster_gateway.envoy_front.access_log import access_logger
from cluster_gateway.envoy_front.contract import LB_METADATA_NAMESPACE
from cluster_gateway.envoy_front.ext_authz_filter import (
    ENDPOINTS_METADATA,
    check_clusters,
    ext_authz_filter,
    models_route,
)
from cluster_gateway.request_path.headers import DESTINATION_HEADER
from common.config.gateway import CircuitBreakers

# Envoy's own replies (picker unreachable or overloaded, no healthy upstream, overflow, upstream
# timeout) as OpenAI JSON instead of text/plain; a failed ext_proc call (a bare 500 — the picker
# itself never answers 500) becomes a retryable 503. The picker's own immediate responses (its
# 4xx/429/503 JSON, `/v1/models`) match neither mapper and pass unchanged.
_ENVOY_ERROR_BODY: dict[str, Any] = {
    "json_format": {
        "error": {
            "message": "%LOCAL_REPLY_BODY%",
            "type": "server_error",
            "param": None,
            "code": "%RESPONSE_CODE_DETAILS%",
        }
    }
}
_CHECK_FAILED_BODY: dict[str, Any] = {
    "json_format": {
        "error": {
            "message": "The gateway could not pick a model server (its endpoint picker did not answer); "
            "retry later.",
            "type": "server_error",
            "param": None,
            "code": "picker_unavailable",
        }
    }
}
LOCAL_REPLY_CONFIG: dict[str, Any] = {
    "mappers": [
        {
            "filter": {
                "status_code_filter": {
                    "comparison": {
                        "op": "EQ",
                        "value": {"default_value": 500, "runtime_key": "fleetgate.l500"},
                    }
                }
            },
            "status_code": 503,
            "body_format_override": _ENVOY_ERROR_BODY,
        },
        {
            "filter": {"response_flag_filter": {"flags": ["UH", "UF", "UO", "NR", "URX", "UT", "UC", "UR"]}},
            "body_format_override": _ENVOY_ERROR_BODY,
        },
        # The ext_authz check failed (the gateway's port refused, reset or timed out): Envoy's
        # `status_on_error` 503 has no body. Denials carry the flag `UAEX` too, with the check's
        # own JSON, so the match is on the details Envoy gives only to failures.
        {
            "filter": {
                "extension_filter": {
                    "name": "envoy.access_loggers.extension_filters.cel",
                    "typed_config": {
                        "@type": "type.googleapis.com/envoy.extensions.access_loggers.filters.cel.v3.ExpressionFilter",
                        "expression": "response.code_details == 'ext_authz_error'",
                    },
                }
            },
            "body_format_override": _CHECK_FAILED_BODY,
        },
    ],
}


LB_ENDPOINTS = {"key": LB_METADATA_NAMESPACE, "path": [{"key": DESTINATION_HEADER}]}


def circuit_breakers(cb: CircuitBreakers) -> dict[str, Any]:
    return {
        "thresholds": [
            {
                "priority": "DEFAULT",
                "max_requests": cb.max_requests,
                "max_pending_requests": cb.max_pending_requests,
                "max_connections": cb.max_connections,
                "max_retries": max(3, cb.max_requests // 10),
            }
        ]
    }


def envoy_bootstrap(
    *,
    listen_port: int,
    extproc_port: int,
    admin_port: int,
    host: str = "127.0.0.1",
    extproc_host: str = "127.0.0.1",
    body_mode: str = "STREAMED",
    response_headers: bool = False,
    picker_streams_per_connection: int = 8,
    max_body_bytes: int = 8 * 1024 * 1024,
    message_timeout_s: float = 30.0,
    upstream_timeout_s: float = 600.0,
    pods: list[tuple[str, int]] | None = None,
    retries: int = 2,
    limits: CircuitBreakers | None = None,
    picker: Literal["ext_proc", "ext_authz"] = "ext_proc",
    check_port: int | None = None,
    check_timeout_s: float = 35.0,
    envoy_token: str | None = None,
    access_log_flush_ms: int | None = 50,
) -> dict[str, Any]:
    """A static Envoy config (as a dict; dump it as YAML or JSON for `envoy -c`).

    Without `pods`, the upstream is an ORIGINAL_DST cluster that goes wherever the picker's header
    says. With `pods` (host, port) it is a STATIC cluster of those pods using the `override_host`
    load-balancing policy: the picker's choice first, then its ranked fallbacks from the `envoy.lb`
    metadata on connect-failure retries (in Kubernetes the pods would come from EDS instead).

    `picker="ext_authz"`: Envoy asks the gateway's HTTP port (`check_port`) for the pod through
    its ext_authz filter instead of opening an ext_proc stream per request (ext_authz_filter.py;
    `check_timeout_s` must exceed the gateway's admission queue timeout).
    """
    # Outcomes and ext_authz releases through Envoy's gRPC access log (access_log.py), unless the
    # ext_proc picker reads the response headers itself (then the log would count each twice).
    loggers = []
    if access_log_flush_ms is not None and (picker == "ext_authz" or not response_headers):
        loggers.append(
            access_logger(
                cluster="fleetgate-picker",
                flush_ms=access_log_flush_ms,
                envoy_token=envoy_token,
                picks=picker == "ext_authz",
            )
        )
    if picker == "ext_authz" and check_port is None:
        raise ValueError("picker='ext_authz' needs check_port (the gateway's HTTP port)")
    breakers = circuit_breakers(limits or CircuitBreakers())
    ext_proc = {
        "@type": "type.googleapis.com/envoy.extensions.filters.http.ext_proc.v3.ExternalProcessor",
        "grpc_service": {
            "envoy_grpc": {"cluster_name": "fleetgate-picker"},
            # the deadline of the whole ext_proc stream, which lives as long as the request: a
            # stream-long LLM response outlived the old 30 s and failed as gRPC CANCELLED
            "timeout": f"{upstream_timeout_s + 60.0}s",
        },
        "failure_mode_allow": False,
        "message_timeout": f"{message_timeout_s}s",
        "processing_mode": {
            "request_header_mode": "SEND",
            "response_header_mode": "SEND" if response_headers else "SKIP",
            "request_body_mode": body_mode,
            # Streamed bodies need trailers sent so a body that ends with trailers still completes
            # (the picker picks on end of stream); free when the request has none.
            "request_trailer_mode": "SKIP" if body_mode == "BUFFERED" else "SEND",
            "response_body_mode": "NONE",
            # SEND even when the response phase is otherwise skipped: since 1.37 Envoy closes the
            # ext_proc stream as soon as it expects no further message (with everything SKIP, right
            # after the request answer, while the response is still being generated; the runtime
            # guard `ext_proc_stream_close_optimization=false` no longer changes that in 1.40). A
            # pending trailers phase keeps the stream open to the end of the HTTP request, whose
            # close then releases the pod's slot; HTTP/1.1 responses have no trailers, so no message.
            "response_trailer_mode": "SEND",
        },
    }
    # More connections to the picker than Envoy's one per worker thread: the gateway's serving
    # processes share the ext_proc port (SO_REUSEPORT), and the kernel spreads connections, not streams
    h2 = {"max_concurrent_streams": picker_streams_per_connection} if picker_streams_per_connection else {}
    if body_mode == "STREAMED":  # else Envoy holds the body until the headers answer: deadlock
        ext_proc["send_body_without_waiting_for_header_response"] = True
    route: dict[str, Any] = {"cluster": "model-servers", "timeout": f"{upstream_timeout_s}s"}
    if pods:
        route["retry_policy"] = {
            "retry_on": "connect-failure,reset-before-request,refused-stream",
            "num_retries": retries,
        }
    hcm = {
        "@type": "type.googleapis.com/envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager",
        "stat_prefix": "inference",
        "stream_idle_timeout": f"{upstream_timeout_s}s",
        "local_reply_config": LOCAL_REPLY_CONFIG,
        "access_log": loggers,
        "route_config": {
            "name": "inference",
            "virtual_hosts": [
                {
                    "name": "all",
                    "domains": ["*"],
                    "routes": [
                        *([models_route(upstream_timeout_s)] if picker == "ext_authz" else []),
                        {"match": {"prefix": "/"}, "route": route},
                    ],
                }
            ],
        },
        "http_filters": [
            ext_authz_filter(
                max_body_bytes=max_body_bytes, check_timeout_s=check_timeout_s, envoy_token=envoy_token
            )
            if picker == "ext_authz"
            else {"name": "envoy.filters.http.ext_proc", "typed_config": ext_proc},
            {
                "name": "envoy.filters.http.router",
                "typed_config": {
                    "@type": "type.googleapis.com/envoy.extensions.filters.http.router.v3.Router"
                },
            },
        ],
    }
    return {
        "admin": {"address": {"socket_address": {"address": host, "port_value": admin_port}}},
        "static_resources": {
            "listeners": [
                {
                    "name": "inference",
                    "address": {"socket_address": {"address": host, "port_value": listen_port}},
                    # STREAMED mode: Envoy queues the body while the pick (which needs all of it)
                    # is pending, and past this limit it stops reading the client: a prompt larger
                    # than Envoy's 1 MiB default would stall. The picker's own limit is the gateway's
                    # `proxy.maxBodyBytes` (413 above it); this must be at least that.
                    "per_connection_buffer_limit_bytes": max_body_bytes + 64 * 1024,
                    "filter_chains": [
                        {
                            "filters": [
                                {"name": "envoy.filters.network.http_connection_manager", "typed_config": hcm}
                            ]
                        }
                    ],
                }
            ],
            "clusters": [
                {**_pods_cluster(pods, picker), "circuit_breakers": breakers},
                *(check_clusters(extproc_host, check_port, breakers) if check_port is not None else []),
                {
                    "name": "fleetgate-picker",
                    "type": "STATIC",
                    "connect_timeout": "2s",
                    "circuit_breakers": breakers,
                    "typed_extension_protocol_options": {
                        "envoy.extensions.upstreams.http.v3.HttpProtocolOptions": {
                            "@type": "type.googleapis.com/envoy.extensions.upstreams.http.v3.HttpProtocolOptions",
                            "explicit_http_config": {"http2_protocol_options": h2},
                        }
                    },
                    "load_assignment": {
                        "cluster_name": "fleetgate-picker",
                        "endpoints": [
                            {
                                "lb_endpoints": [
                                    {
                                        "endpoint": {
                                            "address": {
                                                "socket_address": {
                                                    "address": extproc_host,
                                                    "port_value": extproc_port,
                                                }
                                            }
                                        }
                                    }
                                ]
                            }
                        ],
                    },
                },
            ],
        },
    }


def _pods_cluster(pods: list[tuple[str, int]] | None, picker: str = "ext_proc") -> dict[str, Any]:
    if not pods:
        return {
            "name": "model-servers",
            "type": "ORIGINAL_DST",
            "lb_policy": "CLUSTER_PROVIDED",
            "connect_timeout": "2s",
            "original_dst_lb_config": {"use_http_header": True, "http_header_name": DESTINATION_HEADER},
        }
    override_host = {
        "@type": "type.googleapis.com/envoy.extensions.load_balancing_policies.override_host.v3.OverrideHost",
        "override_host_sources": [
            # the ranked list: ext_proc's `envoy.lb` metadata, or what ext_authz made of the check's header
            {"metadata": ENDPOINTS_METADATA if picker == "ext_authz" else LB_ENDPOINTS},
            {"header": DESTINATION_HEADER},
        ],
        "fallback_policy": {
            "policies": [
                {
                    "typed_extension_config": {
                        "name": "envoy.load_balancing_policies.round_robin",
                        "typed_config": {
                            "@type": "type.googleapis.com/envoy.extensions.load_balancing_policies.round_robin.v3.RoundRobin"
                        },
                    }
                }
            ]
        },
    }
    return {
        "name": "model-servers",
        "type": "STATIC",
        "connect_timeout": "2s",
        "load_balancing_policy": {
            "policies": [
                {
                    "typed_extension_config": {
                        "name": "envoy.load_balancing_policies.override_host",
                        "typed_config": override_host,
                    }
                }
            ]
        },
        "load_assignment": {
            "cluster_name": "model-servers",
            "endpoints": [
                {
                    "lb_endpoints": [
                        {"endpoint": {"address": {"socket_address": {"address": host, "port_value": port}}}}
                        for host, port in pods
                    ]
                }
            ],
        },
    }
