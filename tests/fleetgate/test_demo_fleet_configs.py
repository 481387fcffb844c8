"""The embedded fleet is heterogeneous, and every config it builds passes the real loaders with
secrets stored only as digests."""

from __future__ import annotations

import argparse
from pathlib import Path

import msgspec
import pytest
import yaml

from common.config.loader import ConfigError
from fleetgate import demo
from fleetgate.demo_fleet import (
    BASE_MODEL,
    DEFAULT_FLEET,
    DemoSecrets,
    adapters_of,
    gateway_spec,
    pod_performance,
    pod_spec_document,
    router_config,
)
from global_router.tenants import hash_key
from modelsim.cli import add_arguments as sim_arguments
from modelsim.cli import build_specs


def _keys() -> DemoSecrets:
    return DemoSecrets.generate([c.cluster_id for c in DEFAULT_FLEET])


def test_default_fleet_is_three_regions_that_differ_in_price_gpu_and_capacity_type() -> None:
    assert len(DEFAULT_FLEET) >= 3
    assert len({c.region for c in DEFAULT_FLEET}) == len(DEFAULT_FLEET)
    assert len({c.cost_per_gpu_hour for c in DEFAULT_FLEET}) == len(DEFAULT_FLEET)
    assert {c.capacity_type for c in DEFAULT_FLEET} == {"on-demand", "spot"}
    assert len({p.profile for c in DEFAULT_FLEET for p in c.pods}) >= 3
    assert {p.engine for c in DEFAULT_FLEET for p in c.pods} == {"vllm", "sglang", "tgi"}
    assert any(p.preload for c in DEFAULT_FLEET for p in c.pods)
    assert len({p.max_lora for c in DEFAULT_FLEET for p in c.pods}) >= 2
    assert all(len(c.pods) >= 2 for c in DEFAULT_FLEET)


def test_pod_spec_documents_load_in_the_simulator_cli(tmp_path: Path) -> None:
    for plan in DEFAULT_FLEET:
        path = tmp_path / f"{plan.cluster_id}.yaml"
        path.write_text(yaml.safe_dump(pod_spec_document(plan, time_scale=2.0, seed=7)))
        parser = argparse.ArgumentParser()
        sim_arguments(parser)
        specs = build_specs(parser.parse_args(["--pod-spec", str(path)]))
        assert [s.profile for s in specs] == [p.profile for p in plan.pods]
        assert [s.metrics_format for s in specs] == [p.engine for p in plan.pods]
        assert [s.preload_adapters for s in specs] == [list(p.preload) for p in plan.pods]
        assert all(s.time_scale == 2.0 and s.model == BASE_MODEL for s in specs)


def test_gateway_specs_link_each_cluster_to_the_router_with_its_own_token_file(tmp_path: Path) -> None:
    for plan in DEFAULT_FLEET:
        urls = [f"http://127.0.0.1:{9000 + i}" for i in range(len(plan.pods))]
        spec = gateway_spec(
            plan,
            urls,
            router_capacity_address="127.0.0.1:5999",
            token_file=tmp_path / "t",
            gateway_secret_file=tmp_path / "s",
        )
        assert spec.cluster_id == plan.cluster_id and spec.region == plan.region
        assert spec.global_router is not None and spec.global_router.address == "127.0.0.1:5999"
        assert spec.global_router.token_file == str(tmp_path / "t")
        assert spec.capacity.cost_per_gpu_hour == plan.cost_per_gpu_hour
        assert spec.capacity.capacity_type == plan.capacity_type
        assert spec.auth.mode == "hmac" and spec.auth.secret_file == str(tmp_path / "s")  # auth on
        assert spec.discovery.static is not None
        assert [e.url for e in spec.discovery.static.endpoints] == urls  # type: ignore[union-attr]
    with pytest.raises(ValueError, match="pod URLs"):
        gateway_spec(
            DEFAULT_FLEET[0],
            ["http://127.0.0.1:1"],
            router_capacity_address="x:1",
            token_file=tmp_path,
            gateway_secret_file=tmp_path,
        )


def test_router_config_holds_digests_only_and_two_traffic_classes(tmp_path: Path) -> None:
    keys = _keys()
    cfg = router_config(DEFAULT_FLEET, keys, secret_dir=tmp_path)
    text = msgspec.json.encode(cfg).decode()
    for secret in [
        keys.api_key,
        keys.batch_key,
        keys.admin_key,
        *keys.agent_tokens.values(),
        *keys.gateway_secrets.values(),
    ]:
        assert secret not in text
    assert "redacted" in repr(keys) and keys.api_key not in repr(keys)
    tenants = {t.name: t for t in cfg.tenants}
    assert tenants["interactive"].api_key_sha256 == [hash_key(keys.api_key)]
    assert tenants["batch"].api_key_sha256 == [hash_key(keys.batch_key)]
    assert tenants["batch"].traffic_class == "batch" and tenants["interactive"].traffic_class == "interactive"
    assert {a.cluster_id: a.token_sha256 for a in cfg.capacity.agents} == {
        cid: hash_key(t) for cid, t in keys.agent_tokens.items()
    }
    assert cfg.admin_key_sha256 == hash_key(keys.admin_key)
    for a in cfg.capacity.agents:  # pinned to loopback, allowed explicitly, gateway auth on
        assert a.gateway_hosts == ["127.0.0.1"] and a.allow_loopback
        assert a.gateway_auth is not None and a.gateway_auth.mode == "hmac"
        assert a.gateway_auth.secret_file == str(tmp_path / f"{a.cluster_id}.gateway-secret")
    assert cfg.public_status  # a browser-viewable status page, without internal URLs unless admin
    assert cfg.redis is None
    with_redis = router_config(DEFAULT_FLEET, keys, secret_dir=tmp_path, redis_url="redis://127.0.0.1:1/0")
    assert with_redis.redis is not None


def test_secret_files_are_private(tmp_path: Path) -> None:
    keys = _keys()
    keys.write_files(tmp_path)
    for cid in keys.agent_tokens:
        for name, value in (
            (f"{cid}.token", keys.agent_tokens[cid]),
            (f"{cid}.gateway-secret", keys.gateway_secrets[cid]),
        ):
            path = tmp_path / name
            assert path.read_text().strip() == value
            assert path.stat().st_mode & 0o077 == 0


def test_secrets_are_fresh_every_run() -> None:
    a, b = _keys(), _keys()
    assert a.api_key != b.api_key and a.agent_tokens != b.agent_tokens
    assert a.api_key.startswith("sk-")


def test_header_starts_with_the_endpoint_then_the_key() -> None:
    keys = _keys()
    gws = {c.cluster_id: f"http://127.0.0.1:{9100 + i}" for i, c in enumerate(DEFAULT_FLEET)}
    lines = demo.header("http://127.0.0.1:8123", keys, DEFAULT_FLEET, gws)
    assert lines[0] == "global endpoint: http://127.0.0.1:8123"
    assert lines[1] == f"api key: {keys.api_key}"
    text = "\n".join(lines)
    assert "curl" in text and "from openai import OpenAI" in text and "/fleet" in text
    assert all(t not in text for t in keys.agent_tokens.values())
    assert all(t not in text for t in keys.gateway_secrets.values())
    # the printed examples show that a gateway bypassing the router answers 401
    direct = next(line for line in lines if f"curl -si {gws[DEFAULT_FLEET[0].cluster_id]}/v1/chat" in line)
    assert "authorization" not in direct
    assert "401" in text
    assert all(a in text for a in adapters_of(DEFAULT_FLEET))


def _args(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    demo.add_arguments(parser)
    return parser.parse_args(list(argv))


@pytest.mark.parametrize(
    ("argv", "field"),
    [
        (["--port", "70000"], "--port"),
        (["--time-scale", "0"], "--time-scale"),
        (["--duration", "-1"], "--duration"),
        (["--load-rps", "0"], "--load-rps"),
        (["--redis", "localhost:6379"], "--redis"),
        (["--log-level", "chatty"], "--log-level"),
    ],
)
def test_bad_options_are_refused_naming_the_option(argv: list[str], field: str) -> None:
    with pytest.raises(ConfigError, match=field):
        demo.validate(_args(*argv))
    assert demo.run(_args(*argv)) == 2


def test_each_cluster_quotes_its_hardware_speed_before_serving(tmp_path: Path) -> None:
    by_id = {plan.cluster_id: plan for plan in DEFAULT_FLEET}
    h100, a100, l4 = (pod_performance(by_id[c]) for c in ("us-east-1", "eu-west-1", "ap-south-1"))
    assert h100["prefillMs"] < a100["prefillMs"] < l4["prefillMs"]
    assert h100["decodeTokensPerSecond"] > a100["decodeTokensPerSecond"] > l4["decodeTokensPerSecond"]
    slow = pod_performance(by_id["ap-south-1"], time_scale=2.0)
    assert slow["prefillMs"] == pytest.approx(2 * l4["prefillMs"], rel=0.01)
    plan = by_id["ap-south-1"]
    urls = [f"http://127.0.0.1:{9000 + i}" for i in range(len(plan.pods))]
    spec = gateway_spec(
        plan,
        urls,
        router_capacity_address="127.0.0.1:5999",
        token_file=tmp_path / "t",
        gateway_secret_file=tmp_path,
    )
    assert spec.capacity.pod_performance.prefill_ms == l4["prefillMs"]
