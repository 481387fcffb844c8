"""The ext_authz check as Envoy calls it: the pick in two headers, errors as OpenAI JSON, the slot
held until the access log releases it."""

from __future__ import annotations

import hashlib
import json
from typing import Any

import httpx
import pytest

from cluster_gateway.data_plane import DataPlane
from cluster_gateway.envoy_front.contract import CHECK_PREFIX
from cluster_gateway.observability import GatewayMetrics
from cluster_gateway.pool import EndpointPool
from common.config.gateway import GatewaySpec
from common.config.loader import load_config_data
from tests.cluster_gateway.extproc.conftest import MODEL, add_pod, inflight

CHAT = CHECK_PREFIX + "/v1/chat/completions"


def plane(**overrides: Any) -> DataPlane:
    data: dict[str, Any] = {"discovery": {"static": {"endpoints": []}}, "extAuthz": {"enabled": True}}
    data.update(overrides)
    spec = load_config_data(data, GatewaySpec, source="test")
    pool = EndpointPool()
    add_pod(pool, "busy", 9001, waiting=30, kv=0.7)
    add_pod(pool, "idle", 9002, waiting=0, kv=0.05)
    return DataPlane(spec, pool, GatewayMetrics())


def client(p: DataPlane) -> httpx.AsyncClient:
    assert p.check is not None
    return httpx.AsyncClient(transport=httpx.ASGITransport(app=p.check), base_url="http://picker")


def chat(**extra: Any) -> dict[str, Any]:
    return {"model": MODEL, "messages": [{"role": "user", "content": "hi"}], **extra}


async def test_a_pick_names_the_pod_and_holds_its_slot_until_released() -> None:
    p = plane()
    async with client(p) as c:
        spoof = {"x-gateway-destination-endpoint": "10.0.0.1:1", "x-fleetgate-pod": "busy"}
        r = await c.post(CHAT, json=chat(), headers=spoof)
    assert r.status_code == 200 and r.content == b""
    assert r.headers["x-gateway-destination-endpoint"] == "127.0.0.1:9002"  # the idle pod, not the client's
    pick_id = r.headers["x-fleetgate-pick"]
    # the client's other internal headers are removed from the upstream request by Envoy on our word
    # (the two the check sets are overwritten: removing them would remove the pick)
    assert r.headers["x-envoy-auth-headers-to-remove"] == "x-fleetgate-pod"
    assert inflight(p.pool, "idle") == 1
    assert p.releases is not None
    p.releases.route(pick_id, 200)
    assert inflight(p.pool, "idle") == 0
    p.releases.route(pick_id, 200)  # a duplicate log entry releases nothing twice
    assert inflight(p.pool, "idle") == 0


async def test_errors_are_openai_json_with_their_status_and_take_no_slot() -> None:
    p = plane()
    async with client(p) as c:
        unknown = await c.post(CHAT, json=chat(model="nope"))
        broken = await c.post(CHAT, content=b"{oops", headers={"content-type": "application/json"})
        big = await c.post(CHAT, json=chat(messages=[{"role": "user", "content": "x" * 9_000_000}]))
        path = await c.post(CHECK_PREFIX + "/v1/embeddings", json=chat())
        method = await c.get(CHAT)
    for r, status, code in (
        (unknown, 404, "model_not_found"),
        (broken, 400, "invalid_json"),
        (big, 413, None),
        (path, 404, "unknown_url"),
        (method, 405, None),
    ):
        assert r.status_code == status and r.headers["content-type"] == "application/json", r.text
        err = r.json()["error"]
        assert err["message"] and (code is None or err["code"] == code), err
    assert "/_fleetgate" not in path.json()["error"]["message"]  # the client's path, as it sent it
    assert inflight(p.pool, "idle") == inflight(p.pool, "busy") == 0


async def test_the_check_verifies_the_clients_credential_before_picking() -> None:
    key = "sk-local-test"
    p = plane(auth={"apiKeySha256": [hashlib.sha256(key.encode()).hexdigest()]})
    async with client(p) as c:
        refused = await c.post(CHAT, json=chat())
        allowed = await c.post(CHAT, json=chat(), headers={"authorization": f"Bearer {key}"})
    assert refused.status_code == 401 and refused.json()["error"]["type"]
    assert allowed.status_code == 200 and inflight(p.pool, "idle") == 1


async def test_picks_whose_end_is_never_logged_expire() -> None:
    p = plane(extAuthz={"enabled": True, "slotTtlS": 1})
    assert p.check is not None
    now = [0.0]
    p.check.ledger._clock = lambda: now[0]
    async with client(p) as c:
        r = await c.post(CHAT, json=chat())
    assert r.status_code == 200 and inflight(p.pool, "idle") == 1
    assert p.check.expire() == 0
    now[0] += 1.0
    assert p.check.expire() == 1 and inflight(p.pool, "idle") == 0
    assert p.check.release(r.headers["x-fleetgate-pick"], 200) is False


def test_the_check_is_off_unless_configured() -> None:
    spec = load_config_data({"discovery": {"static": {"endpoints": []}}}, GatewaySpec, source="test")
    p = DataPlane(spec, EndpointPool(), GatewayMetrics())
    assert p.check is None and p.releases is None


@pytest.mark.parametrize("ttl", [0, 5000])
def test_slot_ttl_is_bounded(ttl: float) -> None:
    from common.config.loader import ConfigError

    with pytest.raises(ConfigError):
        load_config_data(
            {"discovery": {"static": {"endpoints": []}}, "extAuthz": {"slotTtlS": ttl}},
            GatewaySpec,
            source="t",
        )


async def test_with_an_envoy_token_only_envoy_may_ask() -> None:
    token = "envoy-only-token"
    p = plane(extProc={"envoyTokenSha256": [hashlib.sha256(token.encode()).hexdigest()]})
    async with client(p) as c:
        stranger = await c.post(CHAT, json=chat())
        wrong = await c.post(CHAT, json=chat(), headers={"x-fleetgate-envoy-token": "guess"})
        envoy = await c.post(CHAT, json=chat(), headers={"x-fleetgate-envoy-token": token})
    assert (
        stranger.status_code == wrong.status_code == 403 and stranger.json()["error"]["code"] == "forbidden"
    )
    assert envoy.status_code == 200 and inflight(p.pool, "idle") == 1


async def test_a_pick_whose_answer_never_reached_envoy_releases_its_slot_at_once() -> None:
    """Envoy's own connections are served by `common/fast_route.py`, which calls `answer()`; an
    answer written to a closed connection is `undelivered`: no request will reach the pod."""
    p = plane()
    assert p.check is not None
    body = json.dumps(chat()).encode()
    answer = await p.check.answer("POST", CHAT, [(b"content-type", b"application/json")], body)
    assert answer.status == 200 and inflight(p.pool, "idle") == 1
    assert answer.undelivered is not None
    answer.undelivered()
    assert inflight(p.pool, "idle") == 0 and len(p.check.ledger) == 0
    denied = await p.check.answer("POST", CHAT, [], b"{oops")
    assert denied.status == 400 and denied.undelivered is None
    assert json.loads(denied.body)["error"]["code"] == "invalid_json"


async def test_the_pick_joins_the_clients_trace() -> None:
    """`Dispatcher.pick_in_trace`: Envoy's request is not ours, but the pick's span belongs to the
    client's trace (`traceparent` reaches the check with the client's other headers)."""
    from opentelemetry import trace
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    from common.telemetry import setup_tracing

    setup_tracing("gateway-test", exporter="none")  # becomes the global provider unless one exists
    provider = trace.get_tracer_provider()
    assert isinstance(provider, TracerProvider)
    exporter = InMemorySpanExporter()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    p = plane()
    assert p.check is not None
    trace_id = "4bf92f3577b34da6a3ce929d0e0e4736"
    headers = [(b"traceparent", f"00-{trace_id}-00f067aa0ba902b7-01".encode())]
    answer = await p.check.answer("POST", CHAT, headers, json.dumps(chat()).encode())
    assert answer.status == 200
    picks = [s for s in exporter.get_finished_spans() if s.name == "gateway.pick"]
    assert picks and all(
        s.context is not None and trace.format_trace_id(s.context.trace_id) == trace_id for s in picks
    )
