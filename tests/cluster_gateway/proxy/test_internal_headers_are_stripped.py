"""A client can never steer routing through headers; hop-by-hop headers never cross the proxy."""

from __future__ import annotations

from cluster_gateway.request_path.headers import (
    client_headers,
    downstream_response_headers,
    is_internal,
    upstream_request_headers,
)


def test_destination_and_internal_fleetgate_headers_are_dropped_but_request_hints_kept() -> None:
    raw = [
        (b"X-Gateway-Destination-Endpoint", b"10.0.0.9:8000"),
        (b"x-fleetgate-pod", b"pod-3"),
        (b"x-fleetgate-cluster", b"eu"),
        (b"x-fleetgate-profile", b"throughput"),
        (b"x-fleetgate-sheddable", b"true"),
        (b"authorization", b"Bearer sk-x"),
        (b"accept", b"a"),
        (b"accept", b"b"),
    ]
    dropped: list[bytes] = []
    h = client_headers(raw, dropped)
    assert dropped == [b"X-Gateway-Destination-Endpoint", b"x-fleetgate-pod", b"x-fleetgate-cluster"]
    assert client_headers(raw) == h
    # the inlined test in client_headers drops exactly what is_internal names
    assert dropped == [k for k, _ in raw if is_internal(k.decode().lower())]
    assert "x-gateway-destination-endpoint" not in h
    assert "x-fleetgate-pod" not in h and "x-fleetgate-cluster" not in h
    assert h["x-fleetgate-profile"] == "throughput"
    assert h["x-fleetgate-sheddable"] == "true"
    assert h["accept"] == "a, b"
    assert is_internal("x-fleetgate-anything") and not is_internal("x-fleetgate-profile")


def test_upstream_request_drops_hop_by_hop_and_length() -> None:
    h = {
        "host": "gw",
        "connection": "keep-alive",
        "transfer-encoding": "chunked",
        "content-length": "12",
        "te": "trailers",
        "authorization": "Bearer k",
        "content-type": "application/json",
        "x-gateway-destination-endpoint": "1.2.3.4:5",
    }
    out = upstream_request_headers(h)
    assert out == {"authorization": "Bearer k", "content-type": "application/json"}


def test_pod_header_only_when_debug_headers_are_on() -> None:
    pod_resp = [
        (b"content-type", b"text/event-stream"),
        (b"connection", b"close"),
        (b"x-fleetgate-pod", b"spoof"),
    ]
    assert downstream_response_headers(pod_resp, None) == [(b"content-type", b"text/event-stream")]
    with_pod = downstream_response_headers(pod_resp, "pod-1")
    assert (b"x-fleetgate-pod", b"pod-1") in with_pod and (b"x-fleetgate-pod", b"spoof") not in with_pod
