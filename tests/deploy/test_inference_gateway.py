"""The chart's Envoy AI Gateway resources (InferencePool + Gateway + HTTPRoute or AIGatewayRoute),
validated against the upstream CRDs stored in tests/deploy/crds/, and the ext_proc TLS the AI
Gateway needs: the rendered certificate serves a real TLS picker on loopback."""

from __future__ import annotations

import base64
from pathlib import Path
from typing import Any

import grpc
import pytest
import yaml
from grpc_health.v1 import health_pb2, health_pb2_grpc

from cluster_gateway.envoy_front.tls import server_credentials
from cluster_gateway.pool import EndpointPool
from common.config import load_config_data
from common.config.gateway import GatewaySpec
from tests.cluster_gateway.extproc.conftest import add_pod, start_picker
from tests.deploy.charts import GATEWAY_CHART, RenderError, kinds, lint, notes, one, render
from tests.deploy.k8s_cel import cel_check
from tests.deploy.k8s_schema import validator

CRDS = Path(__file__).parent / "crds"
ON = {"inferenceGateway": {"enabled": True}}


def _crd_schemas() -> dict[tuple[str, str], dict[str, Any]]:
    out = {}
    for path in sorted(CRDS.glob("*.yaml")):
        crd = yaml.safe_load(path.read_text())
        for version in crd["spec"]["versions"]:
            api = f"{crd['spec']['group']}/{version['name']}"
            out[(api, crd["spec"]["names"]["kind"])] = version["schema"]["openAPIV3Schema"]
    return out


SCHEMAS = _crd_schemas()
VALIDATORS = {key: validator(schema) for key, schema in SCHEMAS.items()}


CORE_APIS = ("v1", "apps/v1", "policy/v1", "rbac.authorization.k8s.io/v1", "networking.k8s.io/v1")


def _check_against_crds(docs: list[dict[str, Any]]) -> dict[str, int]:
    """Every non-core object must have an upstream CRD here and pass it: its OpenAPI schema (unknown
    fields included) and its CEL rules. Returns kind -> CEL rules evaluated."""
    checked: dict[str, int] = {}
    for doc in docs:
        if doc["apiVersion"] in CORE_APIS:
            continue  # core objects (NetworkPolicy included): test_k8s_schemas checks them
        if doc["kind"] == "FleetgateGateway":
            continue  # our own CRD: test_cluster_gateway_chart checks it
        key = (doc["apiVersion"], doc["kind"])
        assert key in VALIDATORS, f"no upstream CRD stored for {key}"
        errors = [
            f"{'/'.join(map(str, e.absolute_path))}: {e.message}" for e in VALIDATORS[key].iter_errors(doc)
        ]
        assert errors == [], (key, errors)
        violations, evaluated = cel_check(SCHEMAS[key], doc)
        assert violations == [], (key, violations)
        checked[doc["kind"]] = evaluated
    return checked


def test_stored_crds_are_the_versions_the_chart_renders() -> None:
    assert set(VALIDATORS) == {
        ("gateway.networking.k8s.io/v1", "Gateway"),
        ("gateway.networking.k8s.io/v1", "HTTPRoute"),
        ("inference.networking.k8s.io/v1", "InferencePool"),
        ("aigateway.envoyproxy.io/v1beta1", "AIGatewayRoute"),
    }
    readme = (CRDS / "README.md").read_text()
    assert all(path.name in readme for path in CRDS.glob("*.yaml")), "each stored CRD names its source"


def test_chart_lints_clean_with_the_inference_gateway() -> None:
    assert lint(GATEWAY_CHART, ON) == []
    assert lint(GATEWAY_CHART, {"inferenceGateway": {"enabled": True, "routeKind": "AIGatewayRoute"}}) == []


def test_httproute_variant_passes_the_upstream_crds() -> None:
    docs = render(GATEWAY_CHART, ON, namespace="inference")
    cel = _check_against_crds(docs)
    assert sorted(cel) == ["Gateway", "HTTPRoute", "InferencePool"]
    assert cel["HTTPRoute"] >= 10 and cel["Gateway"] >= 3, cel
    pool = one(docs, "InferencePool")
    service = one(docs, "Service")
    assert pool["spec"]["endpointPickerRef"] == {
        "name": service["metadata"]["name"],
        "port": {"number": 9002},
        "failureMode": "FailOpen",
    }
    assert pool["metadata"]["annotations"]["aigateway.envoyproxy.io/processing-body-mode"] == "duplex"
    route = one(docs, "HTTPRoute")
    (backend,) = route["spec"]["rules"][0]["backendRefs"]
    assert backend == {
        "group": "inference.networking.k8s.io",
        "kind": "InferencePool",
        "name": pool["metadata"]["name"],
    }
    assert route["spec"]["parentRefs"][0]["name"] == one(docs, "Gateway")["metadata"]["name"]
    assert one(docs, "Gateway")["spec"]["gatewayClassName"] == "eg"
    spec = load_config_data(yaml.safe_load(one(docs, "ConfigMap")["data"]["gateway.yaml"]), GatewaySpec)
    assert spec.ext_proc.enabled, "the picker must be on when Envoy uses it"
    assert spec.discovery.kubernetes is not None
    assert spec.discovery.kubernetes.inference_pool == pool["metadata"]["name"]
    assert "Envoy AI Gateway" in notes(GATEWAY_CHART, ON)


def test_aigatewayroute_variant_on_an_existing_gateway_passes_the_upstream_crds() -> None:
    values = {
        "inferenceGateway": {
            "enabled": True,
            "routeKind": "AIGatewayRoute",
            "models": ["meta-llama/Llama-3.1-8B-Instruct", "mistral"],
            "hostnames": ["llm.example.com"],
            "gateway": {"create": False, "name": "shared", "namespace": "gateways"},
            "processingBodyMode": "buffered",
        }
    }
    docs = render(GATEWAY_CHART, values, namespace="inference")
    cel = _check_against_crds(docs)
    assert sorted(cel) == ["AIGatewayRoute", "InferencePool"]
    assert cel["AIGatewayRoute"] >= 5, cel
    route = one(docs, "AIGatewayRoute")
    assert route["spec"]["parentRefs"] == [
        {"group": "gateway.networking.k8s.io", "kind": "Gateway", "name": "shared", "namespace": "gateways"}
    ]
    (rule,) = route["spec"]["rules"]
    assert [m["headers"][0]["value"] for m in rule["matches"]] == values["inferenceGateway"]["models"]
    assert rule["backendRefs"] == [
        {
            "group": "inference.networking.k8s.io",
            "kind": "InferencePool",
            "name": one(docs, "InferencePool")["metadata"]["name"],
        }
    ]
    assert (
        one(docs, "InferencePool")["metadata"]["annotations"]["aigateway.envoyproxy.io/processing-body-mode"]
        == "buffered"
    )


def test_a_bad_field_in_a_rendered_resource_is_caught_by_the_crd_check() -> None:
    """The check itself must bite: a typo in an HTTPRoute fails the upstream schema."""
    route = one(render(GATEWAY_CHART, ON), "HTTPRoute")
    route["spec"]["rules"][0]["backendRefs"][0]["weigth"] = 1
    assert list(VALIDATORS[("gateway.networking.k8s.io/v1", "HTTPRoute")].iter_errors(route))


def test_a_broken_cel_rule_is_caught() -> None:
    """AI Gateway allows one InferencePool backend per rule: the CEL check must see a second one."""
    docs = render(GATEWAY_CHART, {"inferenceGateway": {"enabled": True, "routeKind": "AIGatewayRoute"}})
    route = one(docs, "AIGatewayRoute")
    refs = route["spec"]["rules"][0]["backendRefs"]
    refs.append({**refs[0], "name": "another-pool"})
    violations, _ = cel_check(SCHEMAS[("aigateway.envoyproxy.io/v1beta1", "AIGatewayRoute")], route)
    assert [v.message for v in violations] == ["only one InferencePool backend is allowed per rule"]


def test_only_the_validated_implementation_renders() -> None:
    with pytest.raises(RenderError, match="implementation"):
        render(GATEWAY_CHART, {"inferenceGateway": {"enabled": True, "implementation": "kgateway"}})


async def test_the_rendered_self_signed_certificate_serves_a_tls_picker(tmp_path: Path) -> None:
    docs = render(GATEWAY_CHART, ON)
    secret = one(docs, "Secret", "-extproc-tls")
    assert secret["type"] == "kubernetes.io/tls"
    pod = one(docs, "Deployment")["spec"]["template"]["spec"]
    assert {
        "name": "extproc-tls",
        "secret": {"secretName": secret["metadata"]["name"], "defaultMode": 0o440},
    } in pod["volumes"]
    mount = next(m for m in pod["containers"][0]["volumeMounts"] if m["name"] == "extproc-tls")
    spec = load_config_data(yaml.safe_load(one(docs, "ConfigMap")["data"]["gateway.yaml"]), GatewaySpec)
    assert spec.ext_proc.tls_cert_file == f"{mount['mountPath']}/tls.crt"
    assert spec.ext_proc.tls_key_file == f"{mount['mountPath']}/tls.key"

    # the pod's files, written where the test can read them
    for key in ("tls.crt", "tls.key"):
        (tmp_path / key).write_bytes(base64.b64decode(secret["data"][key]))
    ext = spec.ext_proc.__class__(
        enabled=True, tls_cert_file=str(tmp_path / "tls.crt"), tls_key_file=str(tmp_path / "tls.key")
    )
    pool = EndpointPool()
    add_pod(pool, "idle", 9002)
    picker, server = await start_picker(pool, credentials=server_credentials(ext))
    try:
        root = grpc.ssl_channel_credentials((tmp_path / "tls.crt").read_bytes())
        service = one(docs, "Service")["metadata"]["name"]
        # Envoy dials the Service's DNS name; the certificate names it
        options = [("grpc.ssl_target_name_override", f"{service}.fleetgate.svc")]
        async with grpc.aio.secure_channel(picker.target, root, options=options) as channel:
            reply = await health_pb2_grpc.HealthStub(channel).Check(
                health_pb2.HealthCheckRequest(), timeout=10
            )
        assert reply.status == health_pb2.HealthCheckResponse.SERVING
    finally:
        await server.stop(0)


def test_existing_tls_secret_is_mounted_and_none_is_generated() -> None:
    docs = render(GATEWAY_CHART, {"extProcTls": {"enabled": True, "existingSecret": "picker-cert"}})
    assert "Secret" not in kinds(docs) and "InferencePool" not in kinds(docs)
    volumes = one(docs, "Deployment")["spec"]["template"]["spec"]["volumes"]
    assert any(v.get("secret", {}).get("secretName") == "picker-cert" for v in volumes)


def test_plain_envoy_default_stays_plaintext() -> None:
    docs = render(GATEWAY_CHART)
    spec = load_config_data(yaml.safe_load(one(docs, "ConfigMap")["data"]["gateway.yaml"]), GatewaySpec)
    assert spec.ext_proc.enabled and spec.ext_proc.tls_cert_file is None
    assert not any(d["kind"] == "Secret" for d in docs)
