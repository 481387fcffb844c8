"""Scheduling plugins are built from config by `factory(name, params, handle)`, placed by their hooks,
and told about dispatches, completions and pool changes; the core never names a plugin."""

from __future__ import annotations

import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest

from cluster_gateway.pool import EndpointPool, PodState
from cluster_gateway.scheduling import Filtered, LLMRequest, PluginBase, SchedulingContext, SchedulingHandle
from cluster_gateway.scheduling import registry as builtin
from cluster_gateway.scheduling.plugin import PLUGINS, register_plugin
from cluster_gateway.scheduling.prefix_cache import PrefixIndexPlugin
from common.config import ConfigError, load_config_data
from common.config.gateway import GatewaySpec, PluginConfig, Profile, Scheduling
from common.plugins import ENTRY_POINT_GROUP, PluginRegistry

from .podfactory import MODEL, add_pod, dispatch, get, req, scheduler

ROOT = Path(__file__).resolve().parents[3]


class PreferLabel(PluginBase):
    """Test scorer: 1.0 for pods whose label `key` equals param `value`, else 0; records its hooks."""

    def __init__(self, name: str, params: Mapping[str, Any], handle: SchedulingHandle) -> None:
        super().__init__(name, params, handle)
        self.key = str(params.get("key", "tier"))
        self.value = str(params["value"])
        self.events: list[tuple[str, str]] = []

    def prepare(self, ctx: SchedulingContext, pods: list[PodState]) -> None:
        self.events.append(("prepare", ctx.request.model))

    def score(self, ctx: SchedulingContext, pods: list[PodState]) -> list[float]:
        return [1.0 if p.endpoint.labels.get(self.key) == self.value else 0.0 for p in pods]

    def on_dispatch(self, req: LLMRequest, pod: PodState) -> None:
        self.events.append(("dispatch", pod.name))

    def on_complete(self, req: LLMRequest, pod: PodState, outcome: str) -> None:
        self.events.append(("complete", f"{pod.name}:{outcome}"))

    def on_pods_changed(self, pods: list[PodState]) -> None:
        self.events.append(("pods", ",".join(sorted(p.name for p in pods))))


class AllSaturated(PluginBase):
    """Test filter: keeps every pod but says they are all saturated."""

    def filter(self, ctx: SchedulingContext, pods: list[PodState]) -> Filtered:
        return Filtered(pods, saturated=True)


register_plugin("test_prefer_label", PreferLabel)
register_plugin("test_all_saturated", AllSaturated)


def _pool() -> EndpointPool:
    pool = EndpointPool()
    for name, tier in (("a", "gold"), ("b", "bronze"), ("c", "bronze")):
        add_pod(pool, name)
        pod = get(pool, name)
        pool.upsert(type(pod.endpoint)(name, pod.endpoint.address, pod.endpoint.port, "vllm", {"tier": tier}))
    return pool


def _cfg(value: str, profile_name: str = "pref", **profile: Any) -> Scheduling:
    return Scheduling(
        default_profile=profile_name,
        plugins=[PluginConfig(type="test_prefer_label", name="tiers", weight=50.0, params={"value": value})],
        profiles={profile_name: Profile(**profile)},
    )


@pytest.mark.parametrize("value", ["gold", "bronze"])
def test_a_configured_plugins_params_decide_the_pick(value: str) -> None:
    pool = _pool()
    s = scheduler(pool, _cfg(value, weights={"tiers": 50.0, "queue": 1.0}))
    picked = {dispatch(pool, s, req(f"q{i}")) for i in range(12)}
    assert {get(pool, n).endpoint.labels["tier"] for n in picked} == {value}


def test_a_profile_lists_plugins_by_name_with_their_configured_weight() -> None:
    pool = _pool()
    s = scheduler(pool, _cfg("gold", "latency", plugins=["tiers"]))  # latency's weights + tiers at 50
    res = s.schedule(req())
    assert res.pod.name == "a"
    assert res.scores["tiers"] == 1.0 and "queue" in res.scores


def test_hooks_follow_the_request_lifecycle_and_pool_changes() -> None:
    pool = _pool()
    s = scheduler(pool, _cfg("gold", weights={"tiers": 1.0}))
    plugin = s.plugin("tiers")
    assert isinstance(plugin, PreferLabel)
    r = req()
    pod = s.schedule(r).pod
    s.on_dispatch(r, pod)
    s.on_complete(r, pod, "ok")
    pool.remove("c")
    s.schedule(req(model=MODEL))
    assert plugin.events == [
        ("pods", "a,b,c"),
        ("prepare", MODEL),
        ("dispatch", "a"),
        ("complete", "a:ok"),
        ("pods", "a,b"),
        ("prepare", MODEL),
    ]


def test_a_filter_reports_saturation_as_its_result() -> None:
    pool = _pool()
    s = scheduler(pool, Scheduling(profiles={"latency": Profile(plugins=["test_all_saturated"])}))
    assert s.schedule(req()).saturated
    assert not scheduler(pool).schedule(req()).saturated


def test_config_file_plugins_and_profile_fields_load() -> None:
    spec = load_config_data(
        {
            "discovery": {"static": {"endpoints": ["http://127.0.0.1:9"]}},
            "scheduling": {
                "plugins": [{"type": "prefix", "name": "prefix_slow_fade", "params": {"fadeDepths": 4}}],
                "profiles": {"latency": {"weights": {"prefix_slow_fade": 2}, "degradedWeights": {"load": 1}}},
            },
        },
        GatewaySpec,
    )
    s = scheduler(_pool(), spec.scheduling)
    assert s.plugin("prefix_slow_fade").fade_depths == 4  # type: ignore[attr-defined]
    assert s.plugin("prefix_slow_fade") is not s.plugin("prefix")
    assert s.plugin("prefix_slow_fade")._index is s.plugin("prefix")._index  # type: ignore[attr-defined]


@pytest.mark.parametrize(
    ("scheduling", "message"),
    [
        (
            {"plugins": [{"type": "nope"}]},
            r"`scheduling.plugins\[0\].type`: unknown scheduling plugin 'nope'",
        ),
        (
            {"plugins": [{"type": "queue"}, {"type": "load", "name": "queue"}]},
            r"`scheduling.plugins\[1\].name`: plugin name 'queue' is used twice",
        ),
        (
            {"profiles": {"x": {"weights": {"model": 1}}}},
            r"`scheduling.profiles.x.weights.model`: .*no `score` hook",
        ),
        (
            {"profiles": {"x": {"filters": ["queue"]}}},
            r"`scheduling.profiles.x.filters\[0\]`: .*no `filter` hook",
        ),
        ({"profiles": {"x": {"picker": "lora"}}}, r"`scheduling.profiles.x.picker`: .*no `pick` hook"),
        (
            {"profiles": {"x": {"plugins": ["prefix_index"]}}},
            r"`scheduling.profiles.x.plugins\[0\]`: .*no `filter`",
        ),
        (
            {"plugins": [{"type": "prefix", "params": {"fadeDepths": "far"}}]},
            r"`scheduling.plugins.prefix.params.fadeDepths`: expected",
        ),
        (
            {"plugins": [{"type": "prefix_raw", "params": {"index": "queue"}}]},
            r"plugin 'queue' is not a prefix index",
        ),
    ],
)
def test_bad_plugin_config_names_the_field(scheduling: dict[str, object], message: str) -> None:
    spec = load_config_data(
        {"discovery": {"static": {"endpoints": ["http://127.0.0.1:9"]}}, "scheduling": scheduling},
        GatewaySpec,
    )
    with pytest.raises(ConfigError, match=message):
        scheduler(_pool(), spec.scheduling)


def test_unknown_types_are_looked_up_in_the_entry_point_group(monkeypatch: pytest.MonkeyPatch) -> None:
    asked: list[tuple[str, str]] = []

    class FakeEntryPoint:
        value = "somepkg:Plugin"

        def load(self) -> object:
            return PreferLabel

    def fake_entry_points(*, group: str, name: str) -> list[FakeEntryPoint]:
        asked.append((group, name))
        return [FakeEntryPoint()] if name == "from_a_package" else []

    monkeypatch.setattr("common.plugins.entry_points", fake_entry_points)
    reg: PluginRegistry[None, object] = PluginRegistry("test plugin")
    assert "from_a_package" in reg and "missing" not in reg
    assert asked == [(ENTRY_POINT_GROUP, "from_a_package"), (ENTRY_POINT_GROUP, "missing")]
    built = reg.build("from_a_package", "x", {"value": "v"}, None, "here")
    assert isinstance(built, PreferLabel) and built.value == "v"


def test_the_scheduler_core_never_names_a_plugin() -> None:
    """Orchestration branches on hooks only: no built-in type appears as a string in the core."""
    core = "".join(
        (ROOT / "cluster_gateway" / "scheduling" / f).read_text()
        for f in ("scheduler.py", "plans.py", "plugin.py")
    )
    literals = set(re.findall(r"\"([a-z_]+)\"", core))
    assert not literals & set(builtin.BUILTIN), literals & set(builtin.BUILTIN)
    assert "test_prefer_label" in PLUGINS


def test_plugins_are_all_built_with_the_scheduler() -> None:
    """One built later would never hear of dispatches or pool changes, so none is."""
    s = scheduler(_pool(), _cfg("gold", weights={"tiers": 1.0}))
    assert isinstance(s.plugin("prefix_index"), PrefixIndexPlugin)  # a dependency of the prefix scorers
    with pytest.raises(RuntimeError, match="never built"):
        s.plugin("power_of_two")  # no profile uses it
