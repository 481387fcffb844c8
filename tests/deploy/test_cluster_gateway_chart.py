"""The cluster-gateway chart: metadata, values schema, least-privilege RBAC, hardened pods, and that
what it renders is a config the gateway accepts and a CR the CRD accepts."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml

from common.config import load_config_data
from common.config.gateway import GatewaySpec
from deploy.gen_crd import CRD_PATH, outputs
from tests.deploy.charts import GATEWAY_CHART, RenderError, kinds, lint, notes, one, render
from tests.deploy.k8s_schema import validator

TEMPLATES = {
    "_helpers.tpl",
    "_security.tpl",
    "networkpolicy.yaml",
    "secret-gateway-auth.yaml",
    "NOTES.txt",
    "configmap.yaml",
    "deployment.yaml",
    "inference-gateway.yaml",
    "fleetgategateway.yaml",
    "pdb.yaml",
    "rbac.yaml",
    "secret-agent-token.yaml",
    "secret-extproc-tls.yaml",
    "service.yaml",
    "serviceaccount.yaml",
    "servicemonitor.yaml",
}
LEAST_PRIVILEGE = [
    {"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "list", "watch"]},
    {
        "apiGroups": ["inference.networking.k8s.io"],
        "resources": ["inferencepools"],
        "verbs": ["get", "list", "watch"],
    },
    {"apiGroups": ["fleetgate.io"], "resources": ["fleetgategateways"], "verbs": ["get", "list", "watch"]},
    {
        "apiGroups": ["fleetgate.io"],
        "resources": ["fleetgategateways/status"],
        "verbs": ["get", "update", "patch"],
    },
]
TOKEN = {
    "agentToken": {"existingSecret": "agent-token", "key": "token"},
    "gatewayAuth": {"existingSecret": "gateway-auth"},  # joining a fleet needs the router's credential
}
ROUTER_LINK = {"globalRouter": {"address": "router.example.internal:50051"}}


def _values() -> dict[str, Any]:
    return yaml.safe_load((GATEWAY_CHART / "values.yaml").read_text())


def _schema() -> dict[str, Any]:
    return json.loads((GATEWAY_CHART / "values.schema.json").read_text())


def _gateway_values(**spec: Any) -> dict[str, Any]:
    gateway = _values()["gateway"]
    gateway.update(spec)
    return {"gateway": gateway}


# --- static checks (always run) -------------------------------------------------------------------


def test_chart_metadata() -> None:
    chart = yaml.safe_load((GATEWAY_CHART / "Chart.yaml").read_text())
    assert chart["apiVersion"] == "v2"
    assert chart["name"] == GATEWAY_CHART.name
    assert chart["type"] == "application"
    assert chart["version"].count(".") == 2 and chart["appVersion"]
    assert chart["kubeVersion"].startswith(">=1.28")
    assert chart["description"]


def test_every_template_is_present() -> None:
    assert {p.name for p in (GATEWAY_CHART / "templates").iterdir()} == TEMPLATES


def test_crd_in_chart_is_the_generated_one() -> None:
    crds = list((GATEWAY_CHART / "crds").iterdir())
    assert crds == [CRD_PATH]
    assert CRD_PATH.read_text() == outputs()[CRD_PATH]


def test_values_schema_is_fresh_from_the_config_structs() -> None:
    path = GATEWAY_CHART / "values.schema.json"
    assert path.read_text() == outputs()[path], "run `python -m deploy.gen_crd`"


def test_default_values_validate_and_are_a_valid_gateway_config() -> None:
    jsonschema.Draft7Validator(_schema()).validate(_values())
    spec = load_config_data(_values()["gateway"], GatewaySpec, source="values.gateway")
    assert spec.ext_proc.enabled and spec.host == "0.0.0.0"


@pytest.mark.parametrize(
    "bad",
    [
        {"gateway": {"discovery": {"kubernetes": {}}, "port": 0}},
        {"gateway": {"discovery": {"kubernetes": {}}, "scrape": {"engine": "triton"}}},
        {"gateway": {"discovery": {"kubernetes": {}}, "bogus": 1}},
        {"gateway": {"clusterId": "x"}},
        {"service": {"type": "ExternalName"}},
        {"inferenceGateway": {"inferencePool": {"failureMode": "Maybe"}}},
        {"envoyGateway": {"enabled": True}},
        {"inferenceGateway": {"implementation": "envoy-gateway"}},
        {"replicas": 3},
        {"envoygateway": {"enabled": True}},
        {"gateway": {**_values()["gateway"], "clusterId": ""}},
        {"gateway": {**_values()["gateway"], "clusterId": "Us_East"}},
        {"gateway": {**_values()["gateway"], "publicUrl": "gateway.example.com:8080"}},
        {"gateway": {**_values()["gateway"], "discovery": {"static": {"endpoints": ["not a url"]}}}},
        {"gateway": {**_values()["gateway"], "discovery": {"static": {"endpoints": [{"url": "10.0.0.1"}]}}}},
        {"gateway": {**_values()["gateway"], "globalRouter": {"address": "http://router:50051"}}},
        {"resources": {"limit": {"memory": "1Gi"}}},
        {"topologySpreadConstraints": [{"maxSkew": 1, "topologyKey": "zone"}]},
        {"topologySpread": {"maxskew": 2}},
        {"workers": 0},
        {"workers": "many"},
    ],
    ids=[
        "port",
        "engine",
        "unknown-field",
        "no-discovery",
        "service-type",
        "failure-mode",
        "old-envoy-gateway-key",
        "plain-envoy-gateway",
        "top-level-typo",
        "envoygateway-typo",
        "empty-cluster-id",
        "cluster-id-not-a-label",
        "public-url-no-scheme",
        "static-not-a-url",
        "static-object-not-a-url",
        "router-address-url",
        "resources-typo",
        "spread-incomplete",
        "spread-typo",
        "workers-zero",
        "workers-word",
    ],
)
def test_bad_values_are_rejected_by_the_schema(bad: dict[str, Any]) -> None:
    values = {**_values(), **bad}
    assert list(jsonschema.Draft7Validator(_schema()).iter_errors(values))


def test_good_urls_and_ids_pass_the_chart_checks() -> None:
    gateway = {
        **_values()["gateway"],
        "clusterId": "us-east-1",
        "publicUrl": "https://gw.us-east.example.com",
        "discovery": {"static": {"endpoints": ["http://10.0.0.1:8000", {"url": "http://[fd00::1]:8000/"}]}},
        "globalRouter": {"address": "router-capacity.fleetgate.svc:50051"},
    }
    jsonschema.Draft7Validator(_schema()).validate({**_values(), "gateway": gateway})


def _object_nodes(node: Any, path: str = "") -> list[tuple[str, dict[str, Any]]]:
    out: list[tuple[str, dict[str, Any]]] = []
    if isinstance(node, dict):
        if node.get("type") == "object" or "properties" in node:
            out.append((path, node))
        for key, child in node.items():
            out += _object_nodes(child, f"{path}/{key}")
    elif isinstance(node, list):
        for i, child in enumerate(node):
            out += _object_nodes(child, f"{path}[{i}]")
    return out


@pytest.mark.parametrize("chart", ["fleetgate-cluster-gateway", "fleetgate-global-router"])
def test_every_object_in_both_values_schemas_is_closed(chart: str) -> None:
    """Unknown keys are errors at every level, not silently ignored. Exempt: free-form maps (labels,
    annotations: additionalProperties is a schema), the Kubernetes affinity kinds passed through as
    given, the chart-check overlays inside allOf (their $ref sibling closes them), selectors, and a
    scheduling plugin's `params` (defined by the plugin, validated by its factory at start)."""
    schema = json.loads((GATEWAY_CHART.parent / chart / "values.schema.json").read_text())
    open_ok = {"nodeAffinity", "podAffinity", "podAntiAffinity", "labelSelector", "params"}
    gaps = [
        path
        for path, node in _object_nodes(schema)
        if "additionalProperties" not in node
        and path.rsplit("/", 1)[-1] not in open_ok
        and "Checks" not in path
    ]
    assert gaps == []


def test_role_template_grants_exactly_least_privilege() -> None:
    """Parse the Role's static rules straight from the template (no renderer needed)."""
    text = (GATEWAY_CHART / "templates" / "rbac.yaml").read_text()
    first_role = text.split("---")[0]
    rules_block = first_role[first_role.index("rules:") :]
    static = "\n".join(line for line in rules_block.splitlines() if "{{" not in line)
    assert yaml.safe_load(static)["rules"] == LEAST_PRIVILEGE
    assert "kind: ClusterRole" not in text and "[secrets]" not in text and "*" not in text.replace("/*", "")


# --- rendered with Helm's engine ------------------------------------------------------------------


def test_chart_lints_clean() -> None:
    assert lint(GATEWAY_CHART) == []


def test_default_render_kinds_and_hardened_pod() -> None:
    docs = render(GATEWAY_CHART)
    assert kinds(docs) == sorted(
        [
            "ConfigMap",
            "Deployment",
            "FleetgateGateway",
            "NetworkPolicy",
            "PodDisruptionBudget",
            "Role",
            "RoleBinding",
            "Service",
            "ServiceAccount",
        ]
    )
    pod = one(docs, "Deployment")["spec"]["template"]["spec"]
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert pod["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
    (container,) = pod["containers"]
    sc = container["securityContext"]
    assert sc["readOnlyRootFilesystem"] is True and sc["allowPrivilegeEscalation"] is False
    assert sc["capabilities"] == {"drop": ["ALL"]}
    # a number of serving processes by default: `auto` would count the node's cores (no CPU limit)
    assert container["args"] == ["gateway", "--config", "/etc/fleetgate/gateway.yaml", "--workers", "2"]
    assert container["livenessProbe"]["httpGet"] == {"path": "/health", "port": "http"}
    assert container["readinessProbe"]["httpGet"] == {"path": "/ready", "port": "http"}
    assert container["resources"]["requests"]["cpu"] == "500m"
    ports = {p["name"]: p["containerPort"] for p in container["ports"]}
    assert ports == {"http": 8080, "grpc-ext-proc": 9002}
    svc_ports = {p["name"]: p["port"] for p in one(docs, "Service")["spec"]["ports"]}
    assert svc_ports == {"http": 8080, "grpc-ext-proc": 9002}


def test_workers_auto_is_passed_on() -> None:
    values = {**_values(), "workers": "auto"}
    jsonschema.Draft7Validator(_schema()).validate(values)
    (container,) = one(render(GATEWAY_CHART, {"workers": "auto"}), "Deployment")["spec"]["template"]["spec"][
        "containers"
    ]
    assert container["args"][-2:] == ["--workers", "auto"]


def test_gateway_replicas_spread_over_zones_and_nodes() -> None:
    pod = one(render(GATEWAY_CHART), "Deployment")["spec"]["template"]["spec"]
    spread = pod["topologySpreadConstraints"]
    assert [c["topologyKey"] for c in spread] == ["topology.kubernetes.io/zone", "kubernetes.io/hostname"]
    selector = one(render(GATEWAY_CHART), "Deployment")["spec"]["selector"]["matchLabels"]
    assert all(c["labelSelector"]["matchLabels"] == selector for c in spread)
    assert {c["whenUnsatisfiable"] for c in spread} == {"ScheduleAnyway"}
    single = one(render(GATEWAY_CHART, {"replicaCount": 1}), "Deployment")["spec"]["template"]["spec"]
    assert "topologySpreadConstraints" not in single
    own = [{"maxSkew": 2, "topologyKey": "rack", "whenUnsatisfiable": "DoNotSchedule"}]
    mine = one(render(GATEWAY_CHART, {"topologySpreadConstraints": own}), "Deployment")
    assert mine["spec"]["template"]["spec"]["topologySpreadConstraints"] == own
    assert "PodDisruptionBudget" not in kinds(render(GATEWAY_CHART, {"replicaCount": 1}))


def test_notes_and_examples_name_the_capacity_service_and_the_crd_upgrade_step() -> None:
    text = notes(GATEWAY_CHART)
    assert "kubectl apply --server-side -f" in text and "crds/" in text
    for path in (
        GATEWAY_CHART / "values.yaml",
        GATEWAY_CHART.parents[2] / "deploy/examples/gateway-inferencepool.yaml",
    ):
        addresses = [line for line in path.read_text().splitlines() if ":50051" in line and "address" in line]
        assert addresses and all("-capacity." in a for a in addresses), path


def test_rendered_config_is_loadable_and_the_cr_passes_the_crd() -> None:
    docs = render(GATEWAY_CHART, {**_gateway_values(**ROUTER_LINK), **TOKEN}, namespace="inference")
    text = one(docs, "ConfigMap")["data"]["gateway.yaml"]
    spec = load_config_data(yaml.safe_load(text), GatewaySpec, source="rendered gateway.yaml")
    assert spec.discovery.kubernetes is not None and spec.discovery.kubernetes.namespace == "inference"
    assert spec.global_router is not None and spec.global_router.address == "router.example.internal:50051"
    cr = one(docs, "FleetgateGateway")
    assert cr["spec"] == yaml.safe_load(text)
    crd_schema = yaml.safe_load(CRD_PATH.read_text())["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    assert list(validator(crd_schema).iter_errors(cr)) == []


def test_rendered_rbac_is_least_privilege_in_the_release_namespace() -> None:
    docs = render(GATEWAY_CHART, namespace="inference")
    role = one(docs, "Role")
    assert role["metadata"]["namespace"] == "inference"
    assert role["rules"] == LEAST_PRIVILEGE
    binding = one(docs, "RoleBinding")
    assert binding["subjects"][0]["name"] == one(docs, "ServiceAccount")["metadata"]["name"]


def test_discovery_in_another_namespace_gets_its_own_read_only_role() -> None:
    values = _gateway_values(
        discovery={"kubernetes": {"namespace": "models", "selector": {"matchLabels": {"a": "b"}}}}
    )
    docs = render(GATEWAY_CHART, values, namespace="fleetgate")
    roles = {d["metadata"]["namespace"]: d["rules"] for d in docs if d["kind"] == "Role"}
    assert roles == {"fleetgate": LEAST_PRIVILEGE[2:], "models": LEAST_PRIVILEGE[:2]}
    assert len([d for d in docs if d["kind"] == "RoleBinding"]) == 2


def test_static_discovery_needs_no_pod_access() -> None:
    docs = render(
        GATEWAY_CHART, _gateway_values(discovery={"static": {"endpoints": ["http://10.0.0.1:8000"]}})
    )
    assert one(docs, "Role")["rules"] == LEAST_PRIVILEGE[2:]


def test_agent_token_comes_from_a_secret_never_from_the_config() -> None:
    docs = render(GATEWAY_CHART, {**_gateway_values(**ROUTER_LINK), **TOKEN})
    env = {e["name"]: e for e in one(docs, "Deployment")["spec"]["template"]["spec"]["containers"][0]["env"]}
    assert env["FLEETGATE_AGENT_TOKEN"]["valueFrom"]["secretKeyRef"] == {
        "name": "agent-token",
        "key": "token",
    }
    assert "Secret" not in kinds(docs)  # an existing Secret is referenced, not created


def test_trial_token_value_creates_the_secret() -> None:
    docs = render(
        GATEWAY_CHART,
        {
            **_gateway_values(**ROUTER_LINK),
            "agentToken": {"value": "s3cret", "key": "token"},
            "gatewayAuth": {"existingSecret": "gateway-auth"},
        },
    )
    secret = one(docs, "Secret")
    assert secret["data"]["token"] == "czNjcmV0"
    cm = one(docs, "ConfigMap")["data"]["gateway.yaml"]
    assert "s3cret" not in cm


def test_router_link_without_a_token_fails_with_a_clear_message() -> None:
    with pytest.raises(RenderError, match=r"agentToken\.existingSecret"):
        render(GATEWAY_CHART, _gateway_values(**ROUTER_LINK))


def test_service_monitor_is_optional() -> None:
    assert "ServiceMonitor" not in kinds(render(GATEWAY_CHART))
    docs = render(
        GATEWAY_CHART, {"metrics": {"serviceMonitor": {"enabled": True, "labels": {"release": "prom"}}}}
    )
    sm = one(docs, "ServiceMonitor")
    assert sm["spec"]["endpoints"][0]["path"] == "/metrics"
    assert sm["metadata"]["labels"]["release"] == "prom"


def test_helm_rejects_bad_values_through_the_schema() -> None:
    with pytest.raises(RenderError, match="port"):
        render(GATEWAY_CHART, _gateway_values(port=70000))


def test_notes_tell_how_to_check_status() -> None:
    assert "get fgw" in notes(GATEWAY_CHART)


def test_examples_dir_is_not_inside_the_chart() -> None:
    assert not (GATEWAY_CHART / "examples").exists()
    assert Path(CRD_PATH).parent == GATEWAY_CHART / "crds"
