"""The multi-region example's graph, checked statically with python-hcl2 (providers cannot be
downloaded here): one owner per namespace, no duplicate Kubernetes objects per cluster, every
gateway URL and agent address taken from a module output, no install waiting on model pods; plus
the mock-provider `terraform test` where the providers can be installed."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest

from tests.deploy.test_terraform import TF, _copy, _parsed

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
        return {("helm_release", release), ("Secret", f"{release}-redis")}
    objs = {("helm_release", release), ("Secret", f"{release}-agent-token")}
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
