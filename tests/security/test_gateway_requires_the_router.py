"""A gateway with `auth.mode: hmac` serves only its router: proxy path, ext_proc picker, end to end."""

from __future__ import annotations

import json
import os
from pathlib import Path

import httpx
import pytest

from cluster_gateway.auth.verifier import GatewayAuthenticator
from cluster_gateway.pool import EndpointPool
from common.config.gateway import GatewayAuth
from global_router.gateway_signer import GatewaySigner
from global_router.tenants import hash_key
from tests.cluster_gateway.extproc.conftest import add_pod, inflight, start_picker
from tests.cluster_gateway.extproc.test_picker_protocol import (
    Envoyish,
    body_msgs,
    chat_body,
    headers_msg,
    immediate,
)
from tests.cluster_gateway.integration.conftest import MODEL, running, tiny
from tests.eventually import eventually
from tests.global_router.integration.fleet_harness import (
    KEY,
    fresh_ready,
    gateway_secret_env,
    router_config,
    start_cluster,
    start_router,
)

SECRET = "gateway-secret-for-this-test-0123456789"
CHAT = {"model": MODEL, "messages": [{"role": "user", "content": "hello"}], "max_tokens": 4}
pytestmark = pytest.mark.timeout(90)


def _signer() -> GatewaySigner:
    return GatewaySigner({"local": ("hmac", SECRET.encode())})


def _signed(body: bytes, path: str = "/v1/chat/completions") -> dict[str, str]:
    return _signer().sign("local", "POST", path, body, {"content-type": "application/json"})


async def test_the_embedded_proxy_refuses_requests_without_the_routers_signature(tmp_path: Path) -> None:
    secret = tmp_path / "gateway-secret"
    secret.write_text(SECRET + "\n")
    auth = {"mode": "hmac", "secretFile": str(secret), "apiKeySha256": [hash_key("sk-direct")]}
    async with running([tiny()], auth=auth) as (_, _gw, client):
        body = json.dumps(CHAT).encode()
        r = await client.post(
            "/v1/chat/completions", content=body, headers={"content-type": "application/json"}
        )
        assert r.status_code == 401
        err = r.json()["error"]
        assert err["type"] == "authentication_error" and err["code"] == "invalid_api_key"
        assert r.headers["www-authenticate"] == "Bearer"
        # a malformed body without credentials is still a 401, never a parse error that leaks behaviour
        assert (await client.post("/v1/completions", content=b"{nope")).status_code == 401
        # the router's signature works once; the same captured request replayed does not
        headers = _signed(body)
        ok = await client.post("/v1/chat/completions", content=body, headers=headers)
        assert ok.status_code == 200, ok.text
        replay = await client.post("/v1/chat/completions", content=body, headers=headers)
        assert replay.status_code == 401 and "replay" in replay.json()["error"]["message"]
        # a signature moved onto another prompt is refused
        other = json.dumps({**CHAT, "max_tokens": 5}).encode()
        assert (
            await client.post("/v1/chat/completions", content=other, headers=_signed(body))
        ).status_code == 401
        # a local API key (direct single-cluster use) works, a wrong one does not
        direct = {"authorization": "Bearer sk-direct"}
        assert (await client.post("/v1/chat/completions", json=CHAT, headers=direct)).status_code == 200
        wrong = {"authorization": "Bearer sk-wrong"}
        assert (await client.post("/v1/chat/completions", json=CHAT, headers=wrong)).status_code == 401
        # the model list needs a credential too; probes and metrics stay open
        assert (await client.get("/v1/models")).status_code == 401
        assert (await client.get("/v1/models", headers=direct)).status_code == 200
        for path in ("/health", "/ready", "/metrics"):
            assert (await client.get(path)).status_code == 200, path


async def test_a_bare_gateway_stays_open() -> None:
    async with running([tiny()]) as (_, gw, client):
        assert not gw.auth.required
        assert (await client.post("/v1/chat/completions", json=CHAT)).status_code == 200


async def test_the_ext_proc_picker_refuses_before_the_pick() -> None:
    pool = EndpointPool()
    add_pod(pool, "only", 9001)
    auth = GatewayAuthenticator(GatewayAuth(mode="hmac", secret_env="UNUSED"), secrets=[SECRET.encode()])
    picker, server = await start_picker(pool, auth=auth)
    try:
        body = chat_body()
        r = await immediate(picker.target, [headers_msg("/v1/chat/completions"), *body_msgs(body)])
        assert r.status.code == 401
        assert json.loads(r.body)["error"]["code"] == "invalid_api_key"
        assert inflight(pool, "only") == 0  # no pod was picked or charged
        models = await immediate(picker.target, [headers_msg("/v1/models", method="GET", eos=True)])
        assert models.status.code == 401
        # with the router's signature (the same headers Envoy passes on), the pick happens
        env = Envoyish(picker.target)
        env.send([headers_msg("/v1/chat/completions", _signed(body)), *body_msgs(body)])
        first = (await env.recv(1))[0]
        assert first.WhichOneof("response") == "request_headers"
        removed = set(first.request_headers.response.header_mutation.remove_headers)
        assert {"x-fleetgate-auth-signature", "x-fleetgate-auth-nonce"} <= removed  # never reach the pod
        await env.close()
    finally:
        await server.stop(0)


async def test_through_the_router_works_and_straight_to_the_gateway_is_401(tmp_path: Path) -> None:
    router = await start_router(router_config(["east"]))
    cluster = await start_cluster("east", tmp_path, router.grpc_port)
    try:
        await eventually(fresh_ready(router, ["east"]), within=10.0, what="east reported")
        async with httpx.AsyncClient(timeout=20) as client:
            via_router = await client.post(
                f"{router.url}/v1/chat/completions", json=CHAT, headers={"authorization": f"Bearer {KEY}"}
            )
            assert via_router.status_code == 200, via_router.text
            assert via_router.headers["x-fleetgate-cluster"] == "east"
            direct = await client.post(f"{cluster.gateway.url}/v1/chat/completions", json=CHAT)
            assert direct.status_code == 401 and direct.json()["error"]["code"] == "invalid_api_key"
            # even with the client's router API key: that key is the router's, not the gateway's
            direct = await client.post(
                f"{cluster.gateway.url}/v1/chat/completions",
                json=CHAT,
                headers={"authorization": f"Bearer {KEY}"},
            )
            assert direct.status_code == 401
    finally:
        await cluster.stop()
        await router.stop()


async def test_a_gateway_refusing_the_routers_credential_is_a_failing_cluster(tmp_path: Path) -> None:
    """The router holds a different secret than the gateway: every attempt is 401, the cluster is
    ejected and the client gets a 502 naming the refusal (not the gateway's 401 about its key)."""
    cfg = router_config(["west"])
    router = await start_router(cfg)
    env = gateway_secret_env("west")
    cluster = None
    try:
        original = os.environ[env]
        os.environ[env] = "a-different-secret-than-the-routers-000"
        try:
            cluster = await start_cluster("west", tmp_path, router.grpc_port)
        finally:
            os.environ[env] = original
        await eventually(fresh_ready(router, ["west"]), within=10.0, what="west reported")
        async with httpx.AsyncClient(timeout=20) as client:
            statuses = []
            for _ in range(2):  # ejectAfterFailures: 2
                r = await client.post(
                    f"{router.url}/v1/chat/completions", json=CHAT, headers={"authorization": f"Bearer {KEY}"}
                )
                statuses.append(r.status_code)
                if r.status_code == 502:
                    assert r.json()["error"]["code"] == "gateway_refused"
            assert statuses == [502, 502]
        assert router.health.is_ejected("west")  # two refusals: ejected like a 5xx cluster
    finally:
        if cluster is not None:
            await cluster.stop()
        await router.stop()
