"""Tier 2 cluster scorers are plugins like Tier 1's: built-ins weighted by `SelectionWeights`, more
built by `factory(name, params, selection)` from `selection.plugins`, weighted per traffic class."""

from __future__ import annotations

import random
from collections.abc import Mapping
from typing import Any

import pytest

from common.config import ConfigError, load_config_data
from common.config.router import Selection
from global_router.cluster_scorers import CLUSTER_SCORERS
from global_router.dispatch_tracker import DispatchTracker
from global_router.selection import Candidate, ClusterSelector, SelectionRequest
from tests.global_router.fleet_fixtures import MODEL, cluster


class PreferRegion:
    """Test scorer: 1.0 for clusters in param `region`, else 0."""

    def __init__(self, name: str, params: Mapping[str, Any], selection: Selection) -> None:
        self.region = str(params["region"])

    def score(self, cands: list[Candidate]) -> list[float]:
        return [1.0 if c.cluster.region == self.region else 0.0 for c in cands]


CLUSTER_SCORERS.register("test_prefer_region", PreferRegion)


def _selection(region: str, **extra: Any) -> Selection:
    return load_config_data(
        {
            "plugins": [
                {"type": "test_prefer_region", "name": "home", "weight": 20, "params": {"region": region}}
            ],
            **extra,
        },
        Selection,
    )


def _rank(sel: Selection, traffic_class: str = "interactive") -> list[str]:
    selector = ClusterSelector(sel, stale_after_s=3.0, tracker=DispatchTracker(), rng=random.Random(1))
    clusters = [cluster("roomy-us", region="us", headroom=30), cluster("tight-eu", region="eu", headroom=5)]
    ranking = selector.rank(clusters, SelectionRequest(model=MODEL, traffic_class=traffic_class))
    return [c.cluster_id for c in ranking.candidates]


def test_builtin_scorers_rank_as_before_without_plugins() -> None:
    assert _rank(Selection()) == ["roomy-us", "tight-eu"]


@pytest.mark.parametrize(("region", "first"), [("eu", "tight-eu"), ("us", "roomy-us")])
def test_a_configured_scorers_params_and_weight_take_effect(region: str, first: str) -> None:
    assert _rank(_selection(region))[0] == first


def test_per_class_plugin_weights_override_the_configured_weight() -> None:
    sel = _selection("eu", classes={"interactive": {"pluginWeights": {"home": 0}}, "batch": {}})
    assert _rank(sel, "interactive")[0] == "roomy-us"  # weighed 0 in this class
    assert _rank(sel, "batch")[0] == "tight-eu"  # the plugin's own weight 20


@pytest.mark.parametrize(
    ("selection", "field"),
    [
        ({"plugins": [{"type": "nope"}]}, "selection.plugins[0].type"),
        (
            {"plugins": [{"type": "test_prefer_region", "name": "cost", "params": {"region": "x"}}]},
            "selection.plugins[0].name",
        ),
        ({"plugins": [{"type": "test_prefer_region"}]}, "selection.plugins[0].type"),  # missing param
        (
            {"classes": {"batch": {"pluginWeights": {"ghost": 1}}}},
            "selection.classes.batch.pluginWeights.ghost",
        ),
    ],
)
def test_bad_cluster_scorer_config_names_the_field(selection: dict[str, object], field: str) -> None:
    with pytest.raises(ConfigError) as ei:
        ClusterSelector(load_config_data(selection, Selection), stale_after_s=3.0, tracker=DispatchTracker())
    assert f"`{field}`" in str(ei.value)
