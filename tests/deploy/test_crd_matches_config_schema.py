"""The CRD is generated from GatewaySpec, so a CR and a config file accept and reject the same things."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from common.config import ConfigError, load_config_data
from common.config.crd import CRD_NAME, gateway_crd
from common.config.gateway import CRD_GROUP, CRD_KIND, CRD_PLURAL, CRD_VERSION, GatewaySpec
from deploy.gen_crd import CRD_PATH, main, render_crd_yaml
from tests.deploy.k8s_schema import structural_violations, validator

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = sorted((ROOT / "deploy" / "examples").glob("gateway-*.yaml"))


def _version(crd: dict[str, Any]) -> dict[str, Any]:
    (version,) = crd["spec"]["versions"]
    return version


def _schema() -> dict[str, Any]:
    return _version(yaml.safe_load(CRD_PATH.read_text()))["schema"]["openAPIV3Schema"]


def test_committed_crd_is_a_fresh_generation() -> None:
    assert CRD_PATH.read_text() == render_crd_yaml(), "run `python -m deploy.gen_crd` and commit the CRD"
    assert main(["--check"]) == 0


def test_check_mode_flags_a_stale_crd(tmp_path: Path) -> None:
    stale = tmp_path / "crd.yaml"
    stale.write_text(render_crd_yaml().replace("minimum: 10", "minimum: 11"))
    assert main(["--check", "--out", str(stale)]) == 1
    assert main(["--out", str(stale)]) == 0
    assert main(["--check", "--out", str(stale)]) == 0


def test_crd_identity_names_and_status_subresource() -> None:
    crd = yaml.safe_load(CRD_PATH.read_text())
    assert crd["metadata"]["name"] == CRD_NAME == f"{CRD_PLURAL}.{CRD_GROUP}"
    assert crd["spec"]["group"] == CRD_GROUP
    assert crd["spec"]["scope"] == "Namespaced"
    names = crd["spec"]["names"]
    assert (names["kind"], names["plural"], names["shortNames"]) == (CRD_KIND, CRD_PLURAL, ["fgw"])
    version = _version(crd)
    assert version["name"] == CRD_VERSION and version["served"] and version["storage"]
    assert version["subresources"] == {"status": {}}
    columns = {c["name"]: c["jsonPath"] for c in version["additionalPrinterColumns"]}
    assert columns == {
        "Cluster": ".spec.clusterId",
        "Region": ".spec.region",
        "Endpoints": ".status.endpoints",
        "Ready": ".status.readyEndpoints",
        "Stale": ".status.stalePods",
        "Age": ".metadata.creationTimestamp",
    }


def test_schema_is_structural() -> None:
    assert structural_violations(_schema()) == []


def test_spec_properties_are_exactly_the_config_fields() -> None:
    import msgspec

    def check(schema: dict[str, Any], struct: type, path: str) -> None:
        fields = {f.encode_name: f for f in msgspec.structs.fields(struct)}
        assert set(schema["properties"]) == set(fields), path

    spec = _schema()["properties"]["spec"]
    check(spec, GatewaySpec, "spec")
    assert spec["required"] == ["discovery"]
    props = spec["properties"]
    assert props["port"] == {"type": "integer", "minimum": 1, "maximum": 65535, "default": 8080}
    assert props["scrape"]["properties"]["engine"]["enum"] == ["auto", "sglang", "tgi", "vllm"]
    assert props["scrape"]["properties"]["modelsRefreshS"]["exclusiveMinimum"] is True
    weights = props["scheduling"]["properties"]["profiles"]["additionalProperties"]["properties"]["weights"]
    assert weights["additionalProperties"] == {"type": "number", "minimum": 0}
    # descriptions come from docstrings and field comments
    assert "InferencePool" in props["discovery"]["properties"]["kubernetes"]["description"]
    assert "Tier 2" in props["publicUrl"]["description"]


def test_status_schema_has_conditions_and_counters() -> None:
    status = _schema()["properties"]["status"]["properties"]
    assert {
        "conditions",
        "endpoints",
        "readyEndpoints",
        "stalePods",
        "observedGeneration",
        "routerConnected",
    } <= set(status)
    cond = status["conditions"]
    assert cond["x-kubernetes-list-type"] == "map" and cond["x-kubernetes-list-map-keys"] == ["type"]
    item = cond["items"]
    assert set(item["properties"]) >= {"type", "status", "reason", "message", "lastTransitionTime"}
    assert sorted(item["properties"]["status"]["enum"]) == ["False", "True", "Unknown"]
    assert item["properties"]["lastTransitionTime"] == {
        "description": "when status last changed",
        "type": "string",
        "format": "date-time",
    }


@pytest.mark.parametrize("example", EXAMPLES, ids=lambda p: p.name)
def test_example_cr_is_valid_for_the_api_server_and_the_gateway(example: Path) -> None:
    cr = yaml.safe_load(example.read_text())
    assert (cr["apiVersion"], cr["kind"]) == (f"{CRD_GROUP}/{CRD_VERSION}", CRD_KIND)
    errors = sorted(validator(_schema()).iter_errors(cr), key=str)
    assert errors == []
    spec = load_config_data(cr["spec"], GatewaySpec, source=example.name)
    assert spec.cluster_id == cr["spec"]["clusterId"]


def test_there_are_examples_of_each_discovery_kind() -> None:
    kinds = {next(iter(yaml.safe_load(p.read_text())["spec"]["discovery"])) for p in EXAMPLES}
    assert kinds == {"static", "kubernetes"}


def _good() -> dict[str, Any]:
    return yaml.safe_load((ROOT / "deploy" / "examples" / "gateway-selector-spot.yaml").read_text())


BAD_SPECS: dict[str, tuple[str, Any]] = {
    "port out of range": ("port", 70000),
    "unknown engine": ("scrape.engine", "triton"),
    "negative queue size": ("admission.queueSize", -1),
    "kv threshold above 1": ("scheduling.profiles", {"latency": {"saturation": {"kvUsage": 1.5}}}),
    "zero refresh interval": ("scrape.modelsRefreshS", 0),
    "negative scorer weight": ("scheduling.profiles", {"latency": {"weights": {"queue": -2}}}),
    "unknown field": ("extProc.enable", True),
    "both discovery kinds": ("discovery.static", {"endpoints": ["http://127.0.0.1:8000"]}),
    "wrong type": ("scrape.intervalMs", "fast"),
}


def _set(obj: dict[str, Any], dotted: str, value: Any) -> None:
    *parents, leaf = dotted.split(".")
    for key in parents:
        obj = obj.setdefault(key, {})
    obj[leaf] = value


@pytest.mark.parametrize("case", sorted(BAD_SPECS))
def test_bad_cr_fails_both_the_crd_schema_and_the_config_loader(case: str) -> None:
    field, value = BAD_SPECS[case]
    cr = _good()
    _set(cr["spec"], field, value)
    assert list(validator(_schema()).iter_errors(cr)), f"CRD schema accepted: {case}"
    with pytest.raises(ConfigError):
        load_config_data(cr["spec"], GatewaySpec, source="bad")


def test_missing_discovery_fails_both() -> None:
    cr = _good()
    del cr["spec"]["discovery"]
    assert list(validator(_schema()).iter_errors(cr))
    with pytest.raises(ConfigError, match="discovery"):
        load_config_data(cr["spec"], GatewaySpec, source="bad")


def test_generator_matches_in_memory_crd() -> None:
    assert yaml.safe_load(render_crd_yaml()) == gateway_crd()
