"""Secure-by-default manifests: gateway auth required to join a fleet, NetworkPolicies, TLS on the
capacity port, a password on the trial Redis, and the Argo CD example's gateway refusing requests
that bypass the router (its rendered config run for real)."""

from __future__ import annotations

import base64
import json
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml

from cluster_gateway.gateway import ClusterGateway
from common.config import load_config_data
from common.config.gateway import GatewaySpec
from global_router.gateway_signer import GatewaySigner
from modelsim.fleet import PodSpec, SimFleet
from tests.cluster_gateway.integration.conftest import MODEL, wait_ready
from tests.deploy.charts import GATEWAY_CHART, ROUTER_CHART, RenderError, lint, one, render
from tests.deploy.test_argocd import _chart_values, _docs, _fill, _merge, _set

JOIN = {
    "gateway": {"globalRouter": {"address": "capacity.example.internal:50051"}},
    "agentToken": {"existingSecret": "agent-token"},
}
AUTH = {"gatewayAuth": {"existingSecret": "gateway-auth"}}


def _spec(docs: list[dict[str, Any]]) -> dict[str, Any]:
    return dict(yaml.safe_load(one(docs, "ConfigMap")["data"]["gateway.yaml"]))


def _pod(docs: list[dict[str, Any]]) -> dict[str, Any]:
    return dict(one(docs, "Deployment")["spec"]["template"]["spec"])


def test_a_gateway_joining_a_fleet_must_authenticate_its_router() -> None:
    with pytest.raises(RenderError, match=r"gatewayAuth\.existingSecret"):
        render(GATEWAY_CHART, JOIN)
    spec = _spec(render(GATEWAY_CHART, {**JOIN, "gatewayAuth": {"mode": "none"}}))  # an explicit choice
    assert spec["auth"] == {"mode": "none"}
    docs = render(GATEWAY_CHART, {**JOIN, **AUTH})
    spec = _spec(docs)
    assert spec["auth"] == {"mode": "hmac", "secretFile": "/var/run/fleetgate/gateway-auth/secret"}
    load_config_data(spec, GatewaySpec, source="rendered")
    pod = _pod(docs)
    assert {"name": "gateway-auth", "secret": {"secretName": "gateway-auth", "defaultMode": 0o440}} in pod[
        "volumes"
    ]
    mounts = pod["containers"][0]["volumeMounts"]
    assert {
        "name": "gateway-auth",
        "mountPath": "/var/run/fleetgate/gateway-auth",
        "readOnly": True,
    } in mounts
    assert "gateway-auth" not in json.dumps(one(docs, "ConfigMap")["data"]).replace(
        "/var/run/fleetgate/gateway-auth", ""
    )


def test_bearer_mode_keeps_only_a_digest_and_a_bare_gateway_stays_open() -> None:
    digest = "a" * 64
    spec = _spec(render(GATEWAY_CHART, {**JOIN, "gatewayAuth": {"tokenSha256": [digest]}}))
    assert spec["auth"] == {"mode": "bearer", "tokenSha256": [digest]}
    assert _spec(render(GATEWAY_CHART))["auth"] == {"mode": "none"}  # no router: a standalone gateway


def test_an_agent_talks_tls_to_the_router_and_verifies_it_against_the_ca() -> None:
    docs = render(GATEWAY_CHART, {**JOIN, **AUTH, "routerCa": {"existingSecret": "router-ca"}})
    link = _spec(docs)["globalRouter"]
    assert link["tls"] is True and link["caFile"] == "/var/run/fleetgate/router-ca/ca.crt"
    assert any(v["name"] == "router-ca" for v in _pod(docs)["volumes"])
    plain = {**JOIN, **AUTH, "gateway": {"globalRouter": {"address": "r:50051", "tls": False}}}
    assert _spec(render(GATEWAY_CHART, plain))["globalRouter"]["tls"] is False  # only when asked


def test_gateway_network_policy_admits_only_the_router_and_envoy() -> None:
    docs = render(GATEWAY_CHART, {**JOIN, **AUTH})
    policy = one(docs, "NetworkPolicy")["spec"]
    assert policy["policyTypes"] == ["Ingress"]
    http, extproc = policy["ingress"]
    assert http["ports"] == [{"port": "http", "protocol": "TCP"}]
    assert all("ipBlock" in peer for peer in http["from"])  # private ranges only: never 0.0.0.0/0
    assert all(not p["ipBlock"]["cidr"].startswith("0.0.0.0") for p in http["from"])
    assert extproc["ports"] == [{"port": "grpc-ext-proc", "protocol": "TCP"}]
    assert extproc["from"] == [
        {"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "envoy-gateway-system"}}}
    ]
    with pytest.raises(RenderError, match="routerFrom is empty"):
        render(GATEWAY_CHART, {**JOIN, **AUTH, "networkPolicy": {"routerFrom": []}})
    assert "NetworkPolicy" not in [
        d["kind"] for d in render(GATEWAY_CHART, {"networkPolicy": {"enabled": False}})
    ]


def test_router_serves_capacity_tls_from_a_mounted_secret_by_default() -> None:
    docs = render(ROUTER_CHART)
    cfg = yaml.safe_load(one(docs, "ConfigMap")["data"]["router.yaml"])
    assert cfg["capacity"]["tlsCertFile"] == "/etc/fleetgate/capacity-tls/tls.crt"
    assert cfg["capacity"]["tlsKeyFile"] == "/etc/fleetgate/capacity-tls/tls.key"
    assert cfg.get("publicStatus") is None  # private status by default (the config's default)
    pod = one(docs, "Deployment")["spec"]["template"]["spec"]
    tls = next(v for v in pod["volumes"] if v["name"] == "capacity-tls")
    assert tls["secret"]["secretName"] == "fg-fleetgate-global-router-capacity-tls"
    for c in pod["containers"]:
        assert {"name": "capacity-tls", "mountPath": "/etc/fleetgate/capacity-tls", "readOnly": True} in c[
            "volumeMounts"
        ]
    off = yaml.safe_load(
        one(render(ROUTER_CHART, {"capacityTls": {"enabled": False}}), "ConfigMap")["data"]["router.yaml"]
    )
    assert "tlsCertFile" not in off["capacity"]


def test_cert_manager_issues_the_capacity_certificate() -> None:
    values = {
        "capacityTls": {
            "certManager": {
                "enabled": True,
                "issuerRef": {"name": "ca"},
                "dnsNames": ["capacity.example.com"],
            }
        }
    }
    cert = one(render(ROUTER_CHART, values), "Certificate")
    assert cert["apiVersion"] == "cert-manager.io/v1"
    assert cert["spec"]["secretName"] == "fg-fleetgate-global-router-capacity-tls"
    assert cert["spec"]["dnsNames"] == ["capacity.example.com"]
    assert cert["spec"]["issuerRef"]["name"] == "ca"
    with pytest.raises(RenderError, match="dnsNames"):
        render(ROUTER_CHART, {"capacityTls": {"certManager": {"enabled": True, "issuerRef": {"name": "ca"}}}})


def test_router_mounts_the_per_cluster_gateway_secrets() -> None:
    docs = render(ROUTER_CHART, {"gatewaySecrets": {"existingSecret": "gw-secrets"}})
    pod = one(docs, "Deployment")["spec"]["template"]["spec"]
    assert any(v.get("secret", {}).get("secretName") == "gw-secrets" for v in pod["volumes"])
    (router,) = pod["containers"]
    assert any(m["mountPath"] == "/etc/fleetgate/gateway-secrets" for m in router["volumeMounts"])


def test_trial_redis_has_a_password_and_admits_only_the_router() -> None:
    docs = render(ROUTER_CHART, {"redis": {"deploy": {"enabled": True}}})
    auth = next(d for d in docs if d["kind"] == "Secret" and d["metadata"]["name"].endswith("-redis-auth"))
    password = base64.b64decode(auth["data"]["password"]).decode()
    url = base64.b64decode(auth["data"]["url"]).decode()
    assert len(password) >= 32 and url == f"redis://:{password}@fg-fleetgate-global-router-redis:6379/0"
    redis = next(d for d in docs if d["kind"] == "Deployment" and d["metadata"]["name"].endswith("-redis"))
    (c,) = redis["spec"]["template"]["spec"]["containers"]
    assert "--requirepass" in c["args"] and "--protected-mode" not in c["args"]
    assert c["env"][0]["valueFrom"]["secretKeyRef"]["key"] == "password"
    router = one(docs, "Deployment", "global-router")["spec"]["template"]["spec"]["initContainers"][0]
    assert router["env"][0]["valueFrom"]["secretKeyRef"] == {"name": auth["metadata"]["name"], "key": "url"}
    policies = {d["metadata"]["name"]: d["spec"] for d in docs if d["kind"] == "NetworkPolicy"}
    redis_policy = policies["fg-fleetgate-global-router-redis"]
    (rule,) = redis_policy["ingress"]
    assert rule["from"][0]["podSelector"]["matchLabels"]["app.kubernetes.io/component"] == "global-router"


def test_both_charts_lint_clean_with_security_settings_on() -> None:
    assert lint(GATEWAY_CHART, {**JOIN, **AUTH, "routerCa": {"existingSecret": "ca"}}) == []
    router = {
        "redis": {"deploy": {"enabled": True}},
        "gatewaySecrets": {"existingSecret": "gw"},
        "capacityTls": {
            "certManager": {
                "enabled": True,
                "issuerRef": {"name": "ca"},
                "dnsNames": ["capacity.example.com"],
            }
        },
    }
    assert lint(ROUTER_CHART, router) == []


def _argocd_gateway_values() -> dict[str, Any]:
    appset, _ = _docs()
    element = appset["spec"]["generators"][0]["list"]["elements"][0]
    helm = _fill(appset["spec"]["template"]["spec"]["source"]["helm"], element)
    values = _merge(_chart_values("fleetgate-cluster-gateway"), helm["valuesObject"])
    for param in helm.get("parameters", []):
        _set(values, param["name"], param["value"])
    return values


def test_argocd_gateways_are_internal_load_balancers_with_auth_and_tls() -> None:
    values = _argocd_gateway_values()
    annotations = values["service"]["annotations"]
    assert annotations["service.beta.kubernetes.io/aws-load-balancer-scheme"] == "internal"
    assert annotations["service.beta.kubernetes.io/aws-load-balancer-internal"] == "true"
    assert values["gateway"]["globalRouter"]["tls"] is True
    _, router = _docs()
    rv = router["spec"]["source"]["helm"]["valuesObject"]
    assert (
        rv["capacityService"]["annotations"]["service.beta.kubernetes.io/aws-load-balancer-scheme"]
        == "internal"
    )
    assert rv["service"]["port"] == 443 and "aws-load-balancer-ssl-cert" in json.dumps(rv["service"])
    assert rv["capacityTls"]["enabled"] and rv["gatewaySecrets"]["existingSecret"]


async def test_the_argocd_gateway_config_refuses_requests_that_bypass_the_router(tmp_path: Path) -> None:
    """The example's rendered gateway.yaml, run for real (pods and secret path swapped for local ones)."""
    spec_data = _spec(render(GATEWAY_CHART, _argocd_gateway_values()))
    assert spec_data["auth"]["mode"] == "hmac"
    secret = "router-to-gateway-secret-0123456789"
    (tmp_path / "secret").write_text(secret + "\n")
    async with SimFleet([PodSpec(profile="tiny")]) as pods:
        spec_data["auth"]["secretFile"] = str(tmp_path / "secret")
        spec_data.update(
            host="127.0.0.1", discovery={"static": {"endpoints": pods.urls}}, extProc={"enabled": False}
        )
        spec_data.pop("globalRouter")  # no router in this test: only the gateway's door is checked
        spec = load_config_data(spec_data, GatewaySpec, source="argocd gateway")
        gw = ClusterGateway(spec, port=0)
        await gw.start()
        try:
            await wait_ready(gw, 1)
            body = json.dumps(
                {"model": MODEL, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 4}
            ).encode()
            headers = {"content-type": "application/json"}
            async with httpx.AsyncClient(base_url=gw.url, timeout=20) as client:
                direct = await client.post("/v1/chat/completions", content=body, headers=headers)
                assert direct.status_code == 401 and direct.json()["error"]["code"] == "invalid_api_key"
                signer = GatewaySigner({"c": ("hmac", secret.encode())})
                signed = signer.sign("c", "POST", "/v1/chat/completions", body, headers)
                r = await client.post("/v1/chat/completions", content=body, headers=signed)
                assert r.status_code == 200, r.text
        finally:
            await gw.stop()
