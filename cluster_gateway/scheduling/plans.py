"""A routing profile compiled to plugin instances: which hook of which plugin runs at each step.

Plugins are placed by the hooks they define, never by their names or types. Names come from the
profile's `filters`, `weights`, `picker`, `degradedWeights` and `plugins`; a name whose plugin lacks
the hook its place needs is a config error naming the field.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from cluster_gateway.scheduling.profiles import ProfileSpec
from cluster_gateway.scheduling.registry import PluginSet
from common.config import ConfigError
from common.plugins import has_hook

Hook = Callable[..., Any]


@dataclass(slots=True)
class FilterStep:
    name: str
    run: Hook
    strict: bool  # pods it removes are never tried as last resorts


@dataclass(slots=True)
class Plan:
    spec: ProfileSpec
    prepare: list[Hook]
    filters: list[FilterStep]
    scorers: list[tuple[float, str, Hook]]  # (weight, plugin name, score hook)
    weight_sum: float
    degraded_scorers: list[tuple[float, str, Hook]]
    degraded_weight_sum: float
    pick: Hook
    candidates: list[Hook] = field(default_factory=list)  # strict filters' index lookups, in order
    nominators: list[Hook] = field(default_factory=list)  # pods a two-stage pick must score
    whole_pool: bool = False  # some plugin needs every candidate: never a two-stage pick


def _hook(plugins: PluginSet, name: str, hook: str, where: str) -> Hook:
    plugin = plugins.get(name, where)
    if not has_hook(plugin, hook):
        raise ConfigError(f"field `{where}`: plugin {name!r} has no `{hook}` hook")
    fn: Hook = getattr(plugin, hook)
    return fn


def _scorers(plugins: PluginSet, weights: Mapping[str, float], where: str) -> list[tuple[float, str, Hook]]:
    hooks = [(w, n, _hook(plugins, n, "score", f"{where}.{n}")) for n, w in weights.items()]
    return [s for s in hooks if s[0] > 0]


def compile_plan(spec: ProfileSpec, plugins: PluginSet) -> Plan:
    where = f"scheduling.profiles.{spec.name}"
    filters = [
        FilterStep(n, _hook(plugins, n, "filter", f"{where}.filters[{i}]"), _strict(plugins, n))
        for i, n in enumerate(spec.filters)
    ]
    weights = dict(spec.weights)
    picker, picker_where = spec.picker, f"{where}.picker"
    for i, n in enumerate(spec.plugins):
        at = f"{where}.plugins[{i}]"
        plugin = plugins.get(n, at)
        placed = False
        if has_hook(plugin, "filter"):
            filters.append(FilterStep(n, _hook(plugins, n, "filter", at), _strict(plugins, n)))
            placed = True
        if has_hook(plugin, "score"):
            weights.setdefault(n, plugins.weight(n))
            placed = True
        if has_hook(plugin, "pick"):
            picker, picker_where, placed = n, at, True
        if not placed:
            raise ConfigError(f"field `{at}`: plugin {n!r} has no `filter`, `score` or `pick` hook")
    scorers = _scorers(plugins, weights, f"{where}.weights")
    degraded = _scorers(plugins, spec.degraded_weights, f"{where}.degradedWeights")
    pick = _hook(plugins, picker, "pick", picker_where)
    names = dict.fromkeys([*(s.name for s in filters), *(n for _, n, _ in scorers), picker])
    prepare = [
        _hook(plugins, n, "prepare", where) for n in names if has_hook(plugins.get(n, where), "prepare")
    ]
    used = [plugins.get(n, where) for n in names]
    return Plan(
        spec=spec,
        prepare=prepare,
        filters=filters,
        scorers=scorers,
        weight_sum=sum(w for w, _, _ in scorers),
        degraded_scorers=degraded,
        degraded_weight_sum=sum(w for w, _, _ in degraded),
        pick=pick,
        candidates=[_hook(plugins, f.name, "candidates", where) for f in filters if _has(plugins, f.name)],
        nominators=[fn for p in used if callable(fn := getattr(p, "nominate", None))],
        whole_pool=any(getattr(p, "whole_pool", False) for p in used),
    )


def _has(plugins: PluginSet, name: str) -> bool:
    """A strict filter that can answer from an index (`candidates`) narrows a two-stage sample's pool."""
    plugin = plugins.get(name, "")
    return bool(getattr(plugin, "strict", False)) and has_hook(plugin, "candidates")


def _strict(plugins: PluginSet, name: str) -> bool:
    return bool(getattr(plugins.get(name, ""), "strict", False))
