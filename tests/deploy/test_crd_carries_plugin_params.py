"""A FleetgateGateway CR (and the chart's `gateway:` values) can configure scheduling plugins: their
free-form `params` are kept by the API server (not pruned) and the gateway builds the plugins."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import jsonschema
import yaml

from cluster_gateway.pool import EndpointPool
from cluster_gateway.scheduling import Scheduler
from common.config import load_config_data
from common.config.gateway import GatewaySpec
from deploy.gen_crd import CRD_PATH
from tests.deploy.k8s_schema import structural_violations, validator

ROOT = Path(__file__).resolve().parents[2]
PLUGINS = [
    {
        "type": "prefix",
        "name": "prefix_slow_fade",
        "weight": 2,
        "params": {"fadeDepths": 4, "index": "prefix_index"},
    },
    {"type": "prefix_index", "params": {"blockChars": 32, "nested": {"any": ["shape"]}}},
]


def _schema() -> dict[str, Any]:
    (version,) = yaml.safe_load(CRD_PATH.read_text())["spec"]["versions"]
    schema: dict[str, Any] = version["schema"]["openAPIV3Schema"]
    return schema


def _cr() -> dict[str, Any]:
    cr = yaml.safe_load((ROOT / "deploy" / "examples" / "gateway-selector-spot.yaml").read_text())
    cr["spec"]["scheduling"] = {
        "plugins": copy.deepcopy(PLUGINS),
        "profiles": {"latency": {"plugins": ["prefix_slow_fade"]}},
    }
    return cr


def test_plugin_params_are_kept_by_the_api_server_schema() -> None:
    schema = _schema()
    assert structural_violations(schema) == []
    item = schema["properties"]["spec"]["properties"]["scheduling"]["properties"]["plugins"]["items"]
    assert item["required"] == ["type"]
    assert item["properties"]["params"] == {
        "description": "the plugin's own settings",
        "type": "object",
        "x-kubernetes-preserve-unknown-fields": True,
    }
    assert sorted(validator(schema).iter_errors(_cr()), key=str) == []


def test_a_cr_with_plugins_builds_them_in_the_gateway() -> None:
    spec = load_config_data(_cr()["spec"], GatewaySpec, source="cr")
    sched = Scheduler(EndpointPool(), spec.scheduling)
    assert sched.plugin("prefix_slow_fade").fade_depths == 4  # type: ignore[attr-defined]
    assert sched.plugin("prefix_index").block_chars == 32  # type: ignore[attr-defined]


def test_the_chart_values_schema_accepts_plugins() -> None:
    chart = ROOT / "deploy" / "helm" / "fleetgate-cluster-gateway"
    schema = json.loads((chart / "values.schema.json").read_text())
    values = yaml.safe_load((chart / "values.yaml").read_text())
    values["gateway"] = {**(values.get("gateway") or {}), "scheduling": _cr()["spec"]["scheduling"]}
    errors = sorted(jsonschema.Draft7Validator(schema).iter_errors(values), key=str)
    assert errors == [], [e.message for e in errors]
