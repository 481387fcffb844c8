from pathlib import Path

import pytest

from common.config import ConfigError, load_config, load_config_data
from common.config.gateway import GatewaySpec


def test_valid_static_config_loads_with_defaults() -> None:
    spec = load_config_data({"discovery": {"static": {"endpoints": ["http://127.0.0.1:8100"]}}}, GatewaySpec)
    assert spec.scrape.interval_ms == 100
    assert spec.scheduling.default_profile == "latency"


def test_nested_type_error_names_the_camel_case_field() -> None:
    with pytest.raises(ConfigError, match=r"field `scrape.intervalMs`"):
        load_config_data({"discovery": {"static": {}}, "scrape": {"intervalMs": "fast"}}, GatewaySpec)


def test_out_of_range_value_names_the_field() -> None:
    with pytest.raises(ConfigError, match=r"field `port`.*<= 65535"):
        load_config_data({"discovery": {"static": {}}, "port": 70000}, GatewaySpec)


def test_discovery_needs_exactly_one_source() -> None:
    with pytest.raises(ConfigError, match=r"field `discovery`: exactly one"):
        load_config_data({"discovery": {}}, GatewaySpec)


def test_unknown_field_is_rejected_by_name() -> None:
    with pytest.raises(ConfigError, match="bogus"):
        load_config_data({"discovery": {"static": {}}, "bogus": 1}, GatewaySpec)


def test_missing_file_and_bad_yaml_are_config_errors(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="cannot read"):
        load_config(tmp_path / "nope.yaml", GatewaySpec)
    bad = tmp_path / "bad.yaml"
    bad.write_text("discovery: [unclosed")
    with pytest.raises(ConfigError, match="invalid YAML"):
        load_config(bad, GatewaySpec)


def test_a_whole_custom_resource_file_uses_its_spec(tmp_path: Path) -> None:
    cr = tmp_path / "cr.yaml"
    cr.write_text(
        "apiVersion: fleetgate.io/v1alpha1\nkind: FleetgateGateway\nmetadata: {name: g}\n"
        "spec:\n  clusterId: c1\n  discovery: {static: {endpoints: ['http://127.0.0.1:1']}}\n"
    )
    assert load_config(cr, GatewaySpec).cluster_id == "c1"
