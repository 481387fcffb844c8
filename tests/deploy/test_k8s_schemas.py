"""Every core Kubernetes object both charts render, in their main configurations, passes the API
server's published schemas for every Kubernetes minor the charts support (1.28-1.33), strictly
(unknown fields are errors). Custom resources are checked against their CRDs elsewhere."""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any

import pytest

from tests.deploy.charts import GATEWAY_CHART, ROUTER_CHART, render

kv = pytest.importorskip("kubernetes_validate", reason="pip install kubernetes-validate")

VERSIONS = ["1.28.0", "1.29.0", "1.30.0", "1.31.0", "1.32.0", "1.33.0"]
CORE = (
    "v1",
    "apps/v1",
    "policy/v1",
    "autoscaling/v2",
    "networking.k8s.io/v1",
    "rbac.authorization.k8s.io/v1",
)
HASH = hashlib.sha256(b"x").hexdigest()
CONFIGS: dict[str, tuple[Path, dict[str, Any]]] = {
    "gateway-default": (GATEWAY_CHART, {}),
    "gateway-one-replica": (GATEWAY_CHART, {"replicaCount": 1}),
    "gateway-ai-gateway": (GATEWAY_CHART, {"inferenceGateway": {"enabled": True}}),
    "gateway-router-link": (
        GATEWAY_CHART,
        {
            "gateway": {"globalRouter": {"address": "r-capacity.fleetgate.svc:50051"}},
            "agentToken": {"value": "trial"},
            "gatewayAuth": {"value": "trial-router-secret"},
            "routerCa": {"existingSecret": "router-ca"},
            "service": {"type": "LoadBalancer", "nodePort": 30880},
        },
    ),
    "router-default": (ROUTER_CHART, {}),
    "router-ha": (
        ROUTER_CHART,
        {
            "autoscaling": {"enabled": True, "minReplicas": 2, "maxReplicas": 4},
            "redis": {"existingSecret": "redis"},
            "existingTenantsSecret": "t",
            "existingAgentsSecret": "a",
            "secretReload": {"reloaderAnnotation": True},
            "agents": [{"clusterId": "c1", "tokenSha256": HASH}],
        },
    ),
    "router-trial-redis-ingress": (
        ROUTER_CHART,
        {"replicaCount": 2, "redis": {"deploy": {"enabled": True}}, "ingress": {"enabled": True}},
    ),
}


@pytest.mark.parametrize("config", sorted(CONFIGS))
def test_rendered_objects_pass_every_supported_kubernetes_schema(config: str) -> None:
    chart, values = CONFIGS[config]
    docs = [d for d in render(chart, values) if d["apiVersion"] in CORE]
    assert docs
    for version in VERSIONS:
        for doc in docs:
            try:
                kv.validate(doc, version, strict=True)
            except kv.ValidationError as exc:
                pytest.fail(f"{config}: {doc['kind']}/{doc['metadata']['name']} on {version}: {exc.message}")
