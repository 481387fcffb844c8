"""Tier 2 cluster scorers as plugins, in the same style as Tier 1's scheduling plugins.

A cluster scorer is built by `factory(name, params, selection)` (`selection` is the router's
`Selection` config, the handle) and defines `score(candidates) -> list[float]`, each in [0, 1].
The built-ins (`selection.py`) are weighted by the `SelectionWeights` field of their name; scorers
configured under `selection.plugins` (any registered or `fleetgate.plugins` entry-point type) by
their `weight`, or per traffic class by `classes.<class>.pluginWeights.<name>`.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

from common.config import ConfigError
from common.config.router import Selection, SelectionWeights, TrafficClassPolicy
from common.plugins import PluginRegistry, has_hook

if TYPE_CHECKING:
    from global_router.selection import Candidate


class ClusterScorer(Protocol):
    def score(self, cands: list[Candidate]) -> list[float]: ...


CLUSTER_SCORERS: PluginRegistry[Selection, object] = PluginRegistry("cluster scorer")


class FunctionScorer:
    """A built-in scorer written as a plain function over the candidates."""

    def __init__(self, fn: Callable[[list[Candidate]], list[float]]) -> None:
        self.score = fn
        self.__doc__ = fn.__doc__


def register_function(type_name: str, fn: Callable[[list[Candidate]], list[float]]) -> None:
    def factory(name: str, params: Mapping[str, Any], selection: Selection) -> FunctionScorer:
        return FunctionScorer(fn)

    factory.__doc__ = fn.__doc__
    CLUSTER_SCORERS.register(type_name, factory)


@dataclass(slots=True)
class WeightedScorer:
    name: str
    score: Callable[[list[Candidate]], list[float]]
    weight_of: Callable[[TrafficClassPolicy], float]


def _builtin_weight(field: str) -> Callable[[TrafficClassPolicy], float]:
    return lambda policy: float(getattr(policy.weights, field))


def _configured_weight(name: str, default: float) -> Callable[[TrafficClassPolicy], float]:
    return lambda policy: float(policy.plugin_weights.get(name, default))


def build_scorers(selection: Selection) -> list[WeightedScorer]:
    """The built-ins (one per `SelectionWeights` field), then `selection.plugins` in order."""
    out = []
    for f in SelectionWeights.__struct_fields__:
        plugin = CLUSTER_SCORERS.build(f, f, {}, selection, f"selection.classes.*.weights.{f}")
        out.append(
            WeightedScorer(f, _score_hook(plugin, f, f"selection.classes.*.weights.{f}"), _builtin_weight(f))
        )
    names = set(SelectionWeights.__struct_fields__)
    for i, spec in enumerate(selection.plugins):
        name = spec.name or spec.type
        where = f"selection.plugins[{i}]"
        if name in names:
            raise ConfigError(f"field `{where}.name`: cluster scorer name {name!r} is used twice")
        names.add(name)
        plugin = CLUSTER_SCORERS.build(spec.type, name, spec.params, selection, f"{where}.type")
        out.append(
            WeightedScorer(name, _score_hook(plugin, name, where), _configured_weight(name, spec.weight))
        )
    for cname, policy in selection.classes.items():
        for pname in policy.plugin_weights:
            if pname not in names:
                raise ConfigError(
                    f"field `selection.classes.{cname}.pluginWeights.{pname}`: no such cluster scorer"
                )
    return out


def _score_hook(plugin: object, name: str, where: str) -> Callable[[list[Candidate]], list[float]]:
    if not has_hook(plugin, "score"):
        raise ConfigError(f"field `{where}`: plugin {name!r} has no `score` hook")
    fn: Callable[[list[Candidate]], list[float]] = plugin.score  # type: ignore[attr-defined]
    return fn
