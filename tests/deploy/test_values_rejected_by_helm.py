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
    (ROUTER_CHART, {"replicas": 3}, "additional properties 'replicas'"),
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
        "router-replicas",
        "router-empty-cluster-id",
        "router-hpa-min-above-max",
    ],
)
def test_helm_refuses(chart: Path, values: dict[str, Any], message: str) -> None:
    with pytest.raises(RenderError) as info:
        render(chart, values)
    assert message in str(info.value)
