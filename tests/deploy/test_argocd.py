"""The ArgoCD ApplicationSet deploys the gateway chart per region and the router once, with values the
charts' schemas and the gateway's loader accept."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import jsonschema
import yaml

from common.config import load_config_data
from common.config.gateway import GatewaySpec

ROOT = Path(__file__).resolve().parents[2]
APPSET = ROOT / "deploy" / "argocd" / "applicationset.yaml"


def _docs() -> list[dict[str, Any]]:
    return [d for d in yaml.safe_load_all(APPSET.read_text()) if d]


def _fill(node: Any, element: dict[str, Any]) -> Any:
    """Substitute `{{ .key }}` placeholders with a generator element's fields (what Argo CD does)."""
    if isinstance(node, dict):
        return {k: _fill(v, element) for k, v in node.items()}
    if isinstance(node, list):
        return [_fill(v, element) for v in node]
    if isinstance(node, str):
        return re.sub(r"\{\{ \.(\w+) \}\}", lambda m: str(element[m.group(1)]), node)
    return node


def _set(values: dict[str, Any], dotted: str, raw: str) -> None:
    *parents, leaf = dotted.split(".")
    for key in parents:
        values = values.setdefault(key, {})
    values[leaf] = yaml.safe_load(raw)  # helm --set parses numbers and booleans


def _chart_values(chart: str) -> dict[str, Any]:
    return dict(yaml.safe_load((ROOT / "deploy" / "helm" / chart / "values.yaml").read_text()))


def _merge(base: dict[str, Any], over: dict[str, Any]) -> dict[str, Any]:
    out = dict(base)
    for k, v in over.items():
        out[k] = _merge(out[k], v) if isinstance(v, dict) and isinstance(out.get(k), dict) else v
    return out


def test_one_gateway_application_per_region_and_one_router() -> None:
    appset, router = _docs()
    assert appset["kind"] == "ApplicationSet" and router["kind"] == "Application"
    elements = appset["spec"]["generators"][0]["list"]["elements"]
    assert sorted(e["cluster"] for e in elements) == ["fleetgate-ap", "fleetgate-eu", "fleetgate-us"]
    template = appset["spec"]["template"]
    assert template["spec"]["source"]["path"] == "deploy/helm/fleetgate-cluster-gateway"
    assert template["spec"]["destination"]["name"] == "{{ .cluster }}"
    assert router["spec"]["source"]["path"] == "deploy/helm/fleetgate-global-router"
    assert router["spec"]["destination"]["name"] in {e["cluster"] for e in elements}
    for path in (template["spec"]["source"]["path"], router["spec"]["source"]["path"]):
        assert (ROOT / path / "Chart.yaml").exists()


def test_generated_gateway_values_pass_the_chart_schema_and_the_loader() -> None:
    appset, _ = _docs()
    schema = json.loads((ROOT / "deploy/helm/fleetgate-cluster-gateway/values.schema.json").read_text())
    ids = set()
    for element in appset["spec"]["generators"][0]["list"]["elements"]:
        helm = _fill(appset["spec"]["template"]["spec"]["source"]["helm"], element)
        values = _merge(_chart_values("fleetgate-cluster-gateway"), helm["valuesObject"])
        for param in helm.get("parameters", []):
            _set(values, param["name"], param["value"])
        jsonschema.Draft7Validator(schema).validate(values)
        spec = load_config_data(values["gateway"], GatewaySpec, source=element["cluster"])
        assert spec.global_router is not None and spec.capacity.cost_per_gpu_hour > 0
        ids.add(spec.cluster_id)
    assert len(ids) == 3


def test_router_values_pass_the_chart_schema() -> None:
    _, router = _docs()
    schema = json.loads((ROOT / "deploy/helm/fleetgate-global-router/values.schema.json").read_text())
    values = _merge(
        _chart_values("fleetgate-global-router"), router["spec"]["source"]["helm"]["valuesObject"]
    )
    jsonschema.Draft7Validator(schema).validate(values)
    assert values["redis"]["existingSecret"], "an autoscaled router needs Redis"
