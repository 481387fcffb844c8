"""Helm itself (its schema validator and the templates' `fail`), not only jsonschema, refuses the bad
values that used to be accepted silently: typos of keys, empty cluster ids, non-URLs, HPA min > max."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.deploy.charts import GATEWAY_CHART, ROUTER_CHART, RenderError, render

HASH = "a" * 64
CASES: list[tuple[Path, dict[str, Any], str]] = [
    (GATEWAY_CHART, {"replicas": 3}, "additional properties 'replicas'"),
    (GATEWAY_CHART, {"envoygateway": {"enabled": True}}, "additional properties 'envoygateway'"),
    (GATEWAY_CHART, {"envoyGateway": {"enabled": True}}, "additional properties 'envoyGateway'"),
    (GATEWAY_CHART, {"gateway": {"clusterId": ""}}, "/gateway/clusterId"),
    (GATEWAY_CHART, {"gateway": {"discovery": {"static": {"endpoints": ["not a url"]}}}}, "endpoints"),
    (GATEWAY_CHART, {"gateway": {"publicUrl": "gw:8080"}}, "/gateway/publicUrl"),
    (GATEWAY_CHART, {"inferenceGateway": {"enabled": True, "gatway": {}}}, "additional properties 'gatway'"),
    (GATEWAY_CHART, {"gatewayAuth": {"secret": "x"}}, "additional properties 'secret'"),
    (GATEWAY_CHART, {"gatewayAuth": {"mode": "hmca"}}, "/gatewayAuth/mode"),
    (GATEWAY_CHART, {"gatewayAuth": {"tokenSha256": ["plain-token"]}}, "/gatewayAuth/tokenSha256/0"),
    (GATEWAY_CHART, {"routerCa": {"existingSecret": "Router_CA"}}, "/routerCa/existingSecret"),
    (GATEWAY_CHART, {"networkPolicy": {"routerFrom": [{"ipBlock": {"cidr": "10.0.0.0"}}]}}, "cidr"),
    (GATEWAY_CHART, {"networkPolicy": {"envoyFrom": [{}]}}, "/networkPolicy/envoyFrom/0"),
    (
        GATEWAY_CHART,
        {"networkPolicy": {"routerFrom": [{"ipBlock": {"cidr": "10.0.0.0/8"}, "podSelector": {}}]}},
        "/networkPolicy/routerFrom/0",
    ),
    (ROUTER_CHART, {"replicas": 3}, "additional properties 'replicas'"),
    (ROUTER_CHART, {"capacityTls": {"enable": True}}, "additional properties 'enable'"),
    (ROUTER_CHART, {"capacityTls": {"certManager": {"dnsNames": ["a b"]}}}, "dnsNames"),
    (ROUTER_CHART, {"capacityTls": {"certManager": {"duration": "90 days"}}}, "duration"),
    (ROUTER_CHART, {"gatewaySecrets": {"existingSecret": "s", "us-east-1": "x"}}, "us-east-1"),
    (ROUTER_CHART, {"networkPolicy": {"httpFrom": [{"ipblock": {}}]}}, "ipblock"),
    (
        ROUTER_CHART,
        {"agents": [{"clusterId": "c1", "tokenSha256": HASH, "gatewayUrls": ["http://u:p@gw:8080"]}]},
        "/agents/0",
    ),
    (ROUTER_CHART, {"agents": [{"clusterId": "", "tokenSha256": HASH}]}, "/agents/0"),
    (
        ROUTER_CHART,
        {
            "autoscaling": {"enabled": True, "minReplicas": 5, "maxReplicas": 2},
            "redis": {"existingSecret": "r"},
        },
        "must not exceed autoscaling.maxReplicas",
    ),
]


@pytest.mark.parametrize(
    ("chart", "values", "message"),
    CASES,
    ids=[
        "gw-replicas",
        "gw-envoygateway-typo",
        "gw-old-envoyGateway",
        "gw-empty-cluster-id",
        "gw-static-not-a-url",
        "gw-public-url-no-scheme",
        "gw-nested-typo",
        "gw-auth-typo",
        "gw-auth-mode",
        "gw-auth-raw-token",
        "gw-router-ca-not-a-name",
        "gw-netpol-cidr",
        "gw-netpol-empty-peer",
        "gw-netpol-ipblock-and-selector",
        "router-replicas",
        "router-capacity-tls-typo",
        "router-capacity-dns-name",
        "router-capacity-duration",
        "router-gateway-secrets-inline",
        "router-netpol-typo",
        "router-gateway-url-userinfo",
        "router-empty-cluster-id",
        "router-hpa-min-above-max",
    ],
)
def test_helm_refuses(chart: Path, values: dict[str, Any], message: str) -> None:
    with pytest.raises(RenderError) as info:
        render(chart, values)
    assert message in str(info.value)
