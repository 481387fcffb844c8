"""The multi-region example's graph, checked statically with python-hcl2 (providers cannot be
downloaded here): one owner per namespace, no duplicate Kubernetes objects per cluster, every
gateway URL and agent address taken from a module output, no install waiting on model pods, no
dependency loop between the router and the gateways, and the trust boundaries wired (per-cluster
gateway HMAC secrets, pinned gateway URLs, capacity TLS by the certificate's name, internal load
balancers, HTTPS for clients); plus the mock-provider `terraform test` where the providers can be
installed."""

from __future__ import annotations

import copy
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest

from tests.deploy.test_terraform import TF, _copy, _parsed
from tests.deploy.tf_graph import _module_doc, build, depends_on, find_cycle

EXAMPLE = TF / "examples" / "multi-region"
REGIONS = ("us", "eu", "ap")


def _blocks(doc: dict[str, Any], kind: str) -> dict[str, dict[str, Any]]:
    return {name: body for block in doc.get(kind, []) for name, body in block.items()}


MAIN = _parsed(EXAMPLE / "main.tf")
MODULES = _blocks(MAIN, "module")
RESOURCES = {
    (kind, name): body for r in MAIN["resource"] for kind, named in r.items() for name, body in named.items()
}


def _resource(doc: dict[str, Any], kind: str, name: str) -> dict[str, Any]:
    return next(named[name] for r in doc["resource"] for k, named in r.items() if k == kind and name in named)


def _module_dir(call: dict[str, Any]) -> Path:
    return (EXAMPLE / call["source"]).resolve()


def _defaults(module_dir: Path) -> dict[str, Any]:
    return {
        name: body.get("default")
        for name, body in _blocks(_parsed(module_dir / "variables.tf"), "variable").items()
    }


def _cluster_of(call: dict[str, Any]) -> str:
    ref = call.get("providers", {}).get("kubernetes", "")
    m = re.fullmatch(r"\$\{kubernetes\.(\w+)\}", ref)
    assert m, f"module without a kubernetes provider alias: {call.get('source')}"
    return m.group(1)


def _k8s_modules() -> dict[str, dict[str, Any]]:
    return {name: call for name, call in MODULES.items() if "kubernetes" in call.get("providers", {})}


def test_each_cluster_has_exactly_one_namespace_owner_and_no_module_creates_one() -> None:
    owners = {name: body for (kind, name), body in RESOURCES.items() if kind == "kubernetes_namespace_v1"}
    assert set(owners) == set(REGIONS), "one namespace resource per cluster"
    for region, body in owners.items():
        assert body["provider"] == f"${{kubernetes.{region}}}"
        # for_each over a set: each name once; the set comes from the tested wiring module
        assert body["for_each"] == f'${{toset(module.wiring.namespaces["{region}"])}}'
    for name, call in _k8s_modules().items():
        assert call.get("create_namespace") is False, f"module.{name} must not create its namespace"
        cluster = _cluster_of(call)
        assert call["namespace"].startswith(f"${{kubernetes_namespace_v1.{cluster}["), (
            f"module.{name} must take its namespace from the cluster's one owner"
        )


def test_the_modules_create_namespaces_only_when_asked() -> None:
    for module in ("cluster-gateway", "global-router"):
        main = _parsed(TF / "modules" / module / "main.tf")
        ns = _resource(main, "kubernetes_namespace_v1", "this")
        assert ns["count"] == "${var.create_namespace ? 1 : 0}"


def _objects_created(name: str, call: dict[str, Any]) -> set[tuple[str, str]]:
    """(kind, name) of the Kubernetes objects a module call creates outside Helm plus the release."""
    values = {**_defaults(_module_dir(call)), **call}
    release = values["release_name"]
    if call["source"].endswith("global-router"):
        return {
            ("helm_release", release),
            ("Secret", f"{release}-redis"),
            ("Secret", f"{release}-gateway-secrets"),
        }
    objs = {
        ("helm_release", release),
        ("Secret", f"{release}-agent-token"),
        ("Secret", f"{release}-gateway-auth"),
    }
    if values.get("public_service", {}).get("enabled"):
        objs.add(("Service", f"{release}-public"))
    return objs


def test_no_two_modules_create_the_same_object_in_one_cluster() -> None:
    seen: dict[tuple[str, str, str], str] = {}
    for name, call in _k8s_modules().items():
        cluster = _cluster_of(call)
        for kind, obj in _objects_created(name, call):
            key = (cluster, kind, obj)
            assert key not in seen, (
                f"module.{name} and module.{seen[key]} both create {kind} {obj} in {cluster}"
            )
            seen[key] = name
    assert {c for c, _, _ in seen} == set(REGIONS)


def test_every_gateway_url_and_agent_address_comes_from_a_module_output() -> None:
    gateways = {name: call for name, call in MODULES.items() if call["source"].endswith("cluster-gateway")}
    assert set(gateways) == {f"gateway_{r}" for r in REGIONS}
    for name, call in gateways.items():
        region = name.removeprefix("gateway_")
        assert "public_url" not in call, (
            f"module.{name}: publicUrl must come from its load balancer, not a literal"
        )
        assert call["public_service"]["enabled"] is True
        assert call["global_router"].startswith("${merge(module.wiring.router_link, "), name
        for key in ("cluster_id", "region", "discovery", "capacity"):
            assert call[key] == f'${{module.wiring.gateways["{region}"].{key}}}', (name, key)
    wiring = MODULES["wiring"]
    assert wiring["router_capacity_address"] == "${module.router.capacity_address}"
    assert MODULES["router"]["agents"] == "${module.wiring.agents}"
    # the gateway module turns its Service's load balancer status into the spec's publicUrl
    gw_main = _parsed(TF / "modules" / "cluster-gateway" / "main.tf")
    spec_call = _blocks(gw_main, "module")["spec"]
    assert spec_call["public_host"] == "${var.public_service.enabled ? local.public_host : null}"
    # and the example's outputs show those module outputs
    outputs = _blocks(_parsed(EXAMPLE / "outputs.tf"), "output")
    text = str(outputs["gateways"]["value"])
    assert all(f"module.gateway_{r}.public_url" in text for r in REGIONS)


def test_no_address_is_typed_into_the_example() -> None:
    """No URL, host:port or .svc name in any argument: addresses exist only as module outputs."""
    literal = re.compile(r"https?://|\.svc\b|:(8080|50051)\b")
    for path in ("main.tf", "outputs.tf", "variables.tf"):
        for line in (EXAMPLE / path).read_text().splitlines():
            code = line.split("#", 1)[0]
            if "${" in code and re.search(r"https?://", code) and "aws_route53_record" in code:
                continue  # the client-facing output composes the DNS record's name
            assert not literal.search(code), f"{path}: {line.strip()}"


def test_gateway_installs_do_not_wait_for_model_pods() -> None:
    main = _parsed(TF / "modules" / "cluster-gateway" / "main.tf")
    release = _resource(main, "helm_release", "this")
    assert release["wait"] == "${var.wait_for_ready}" and release["atomic"] == "${var.wait_for_ready}"
    assert _defaults(TF / "modules" / "cluster-gateway")["wait_for_ready"] is False
    assert all("wait_for_ready" not in call for call in MODULES.values())


def test_the_model_namespace_is_a_variable_wired_into_discovery() -> None:
    variables = _blocks(_parsed(EXAMPLE / "variables.tf"), "variable")
    assert "model_namespace" in str(variables["clusters"]["type"])
    assert MODULES["wiring"]["clusters"] and "c.model_namespace" in str(MODULES["wiring"]["clusters"])


def test_example_with_mock_providers_where_they_can_be_installed(tmp_path: Path) -> None:
    exe = shutil.which("terraform")
    if exe is None:
        pytest.skip("terraform binary not installed")
    example = _copy(tmp_path) / "examples" / "multi-region"
    init = subprocess.run(
        [exe, "init", "-backend=false", "-input=false", "-no-color"],
        cwd=example,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    if init.returncode != 0:
        errors = [ln.strip("│ ") for ln in init.stderr.splitlines() if "Error" in ln] or ["init failed"]
        pytest.skip(
            "mock_provider still needs each provider's schema and the helm/kubernetes/random/aws "
            f"providers cannot be installed here ({errors[0][:160]})"
        )
    proc = subprocess.run(
        [exe, "test", "-no-color"], cwd=example, capture_output=True, text=True, timeout=300, check=False
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr


GRAPH = build(EXAMPLE, _parsed)


def _with_argument(module: str, arg: str, expr: str) -> dict[str, Any]:
    doc = copy.deepcopy(_module_doc(EXAMPLE, _parsed))
    for block in doc["module"]:
        if module in block:
            block[module][arg] = expr
    return doc


def test_the_router_and_the_gateways_feed_each_other_without_a_dependency_loop() -> None:
    """Router <- gateway URLs <- gateway Services, and gateways <- router capacity address: fine only
    because each edge goes through separate nodes (a loop would fail `terraform plan`)."""
    assert find_cycle(GRAPH) is None
    # both directions are real, so the absence of a loop is not vacuous
    assert depends_on(
        GRAPH, "module.router.helm_release.this", ["module.gateway_eu.kubernetes_service_v1.public"]
    )
    assert depends_on(
        GRAPH, "module.gateway_eu.helm_release.this", ["module.router.data.kubernetes_service_v1.capacity"]
    )
    # and the check finds the loops this wiring avoids: the capacity certificate named from the DNS
    # record that points at the router's own load balancer, or a gateway URL derived from the router
    cert_from_record = _with_argument(
        "wiring", "router_capacity_dns_name", "${aws_route53_record.capacity.fqdn}"
    )
    loop = find_cycle(build(EXAMPLE, _parsed, doc=cert_from_record))
    assert loop is not None and "aws_route53_record.capacity" in loop
    url_from_router = _with_argument(
        "gateway_eu", "public_url", '${split(":", module.router.capacity_address)[0]}'
    )
    assert find_cycle(build(EXAMPLE, _parsed, doc=url_from_router)) is not None


def test_every_gateway_serves_only_requests_the_router_signed_with_that_clusters_secret() -> None:
    secret = RESOURCES[("random_password", "gateway_secret")]
    assert secret["for_each"] == "${var.clusters}" and secret["length"] >= 32
    for region in REGIONS:
        call = MODULES[f"gateway_{region}"]
        link = re.sub(r"\s+", " ", call["global_router"])
        assert f'gateway_secret = random_password.gateway_secret["{region}"].result' in link, link
        assert f'token = random_password.agent_token["{region}"].result' in link, link
        assert call["router_ca_secret"] == "${var.router_ca_secret}"
        # the gateway's Helm release waits for its HMAC Secret, the router's for the same secrets
        assert depends_on(
            GRAPH, f"module.gateway_{region}.helm_release.this", ["random_password.gateway_secret"]
        )
    assert "random_password.gateway_secret" in MODULES["wiring"]["gateway_secrets"]
    assert MODULES["router"]["gateway_secrets"] == "${module.wiring.router_gateway_secrets}"
    assert depends_on(GRAPH, "module.router.helm_release.this", ["random_password.gateway_secret"])
    # the gateway module: the secret goes into its own Secret, mounted through the chart's gatewayAuth
    gw_main = _parsed(TF / "modules" / "cluster-gateway" / "main.tf")
    auth = _resource(gw_main, "kubernetes_secret_v1", "gateway_auth")
    assert auth["data"] == {"secret": "${var.global_router.gateway_secret}"}
    release = _resource(gw_main, "helm_release", "this")
    assert "${kubernetes_secret_v1.gateway_auth}" in release["depends_on"]
    assert "gatewayAuth = {existingSecret = local.reports_to_route ? local.auth_secret" in release["values"]
    # the router module: one mounted file per cluster id, named in that agent's gatewayAuth
    gr_main = _parsed(TF / "modules" / "global-router" / "main.tf")
    assert "/etc/fleetgate/gateway-secrets/${id}" in str(gr_main["locals"])


def test_the_router_pins_each_agent_to_its_gateways_load_balancer() -> None:
    wiring = MODULES["wiring"]
    assert wiring["gateway_urls"] == {r: f"${{module.gateway_{r}.public_url}}" for r in REGIONS}
    assert MODULES["router"]["gateway_urls"] == "${module.wiring.router_gateway_urls}"
    for region in REGIONS:
        assert depends_on(
            GRAPH, "module.router.local.agents", [f"module.gateway_{region}.kubernetes_service_v1.public"]
        )
    # the router module refuses an agent without a pinned gateway
    gr_main = _parsed(TF / "modules" / "global-router" / "main.tf")
    release = _resource(gr_main, "helm_release", "this")
    assert "gateway_urls" in str(release["lifecycle"])


def test_agents_dial_the_capacity_certificates_name_over_tls() -> None:
    wiring = MODULES["wiring"]
    assert wiring["router_capacity_dns_name"] == "${var.capacity_dns_name}"
    assert wiring["capacity_tls_issuer"] == "${var.capacity_tls_issuer}"
    assert "router_tls" not in wiring and _defaults(TF / "modules" / "fleet-wiring")["router_tls"] is True
    assert MODULES["router"]["capacity_tls"] == "${module.wiring.router_capacity_tls}"
    # the record agents resolve is the certificate's name, on the router's capacity load balancer
    record = RESOURCES[("aws_route53_record", "capacity")]
    assert record["name"] == "${var.capacity_dns_name}"
    assert "module.router.capacity_address" in str(record["records"])
    # a gateway whose link omits `tls` still talks TLS
    gw_main = _parsed(TF / "modules" / "cluster-gateway" / "main.tf")
    assert "try(nonsensitive(var.global_router.tls), true)" in str(gw_main["locals"])


def test_load_balancers_are_internal_and_clients_use_https() -> None:
    internal = _defaults(EXAMPLE)["internal_lb_annotations"]
    assert internal["service.beta.kubernetes.io/aws-load-balancer-scheme"] == "internal"
    router = MODULES["router"]
    assert router["capacity_service"]["annotations"] == "${var.internal_lb_annotations}"
    for region in REGIONS:
        call = MODULES[f"gateway_{region}"]
        assert call["public_service"]["annotations"] == "${var.internal_lb_annotations}"
        assert "service" not in call, "the chart's own Service stays ClusterIP"
    service = router["service"]
    assert service["port"] == 443 and "aws-load-balancer-ssl-cert" in service["annotations"]
    assert "var.router_certificate_arn" in service["annotations"]
    check = RESOURCES[("aws_route53_health_check", "router")]
    assert check["type"] == "HTTPS" and check["port"] == 443
    outputs = _blocks(_parsed(EXAMPLE / "outputs.tf"), "output")
    assert outputs["global_endpoint"]["value"].startswith("https://")
