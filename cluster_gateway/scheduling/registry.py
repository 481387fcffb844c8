"""The built-in scheduling plugin types, and `PluginSet`: one scheduler's named plugin instances.

A name in a profile resolves to the `scheduling.plugins` entry of that name, else to the built-in
(or entry-point) type of that name with default params. Each name is built once per scheduler and
shared by every profile naming it, so state a plugin keeps (the prefix index, adapter memory,
round-robin position) follows every dispatch, whichever profile chose the pod.
"""

from __future__ import annotations

from cluster_gateway.scheduling import filters, pickers, scorers
from cluster_gateway.scheduling.kv_fit import KVFitFilter
from cluster_gateway.scheduling.plugin import PLUGINS, PluginFactory, SchedulingHandle, register_plugin
from cluster_gateway.scheduling.precise.plugin import PrecisePrefixScorer
from cluster_gateway.scheduling.prefill_backlog import PrefillBacklogScorer
from cluster_gateway.scheduling.prefix_cache import PrefixIndexPlugin
from common.config import ConfigError
from common.config.gateway import PluginConfig, Scheduling

BUILTIN: dict[str, PluginFactory] = {
    "model": filters.ModelFilter,
    "healthy": filters.HealthyFilter,
    "fresh": filters.FreshFilter,
    "saturation": filters.SaturationFilter,
    "kv_fit": KVFitFilter,
    "queue": scorers.QueueScorer,
    "queue_waiting": scorers.WaitingQueueScorer,
    "load": scorers.LoadScorer,
    "inflight": scorers.InflightScorer,
    "kv_cache": scorers.KVCacheScorer,
    "kv_raw": scorers.RawKVCacheScorer,
    "prefix": scorers.PrefixScorer,
    "prefix_home": scorers.PrefixHomeScorer,
    "prefix_raw": scorers.RawPrefixScorer,
    "precise_prefix": PrecisePrefixScorer,
    "prefill": PrefillBacklogScorer,
    "lora": scorers.LoraScorer,
    "prefix_index": PrefixIndexPlugin,
    "max_score": pickers.MaxScorePicker,
    "power_of_two": pickers.PowerOfTwoPicker,
    "weighted_random": pickers.WeightedRandomPicker,
    "round_robin": pickers.RoundRobinPicker,
}
for _type, _factory in BUILTIN.items():
    register_plugin(_type, _factory)


class PluginSet:
    """Named plugin instances, built on first reference (configured ones at once, so bad params fail
    at startup even when no profile uses them)."""

    def __init__(self, config: Scheduling, handle: SchedulingHandle) -> None:
        self._specs: dict[str, tuple[int, PluginConfig]] = {}
        for i, spec in enumerate(config.plugins):
            name = spec.name or spec.type
            if name in self._specs:
                raise ConfigError(f"field `scheduling.plugins[{i}].name`: plugin name {name!r} is used twice")
            self._specs[name] = (i, spec)
        self._handle = handle
        self._built: dict[str, object] = {}
        self._building: list[str] = []
        self._sealed = False
        handle._resolve = self._dependency
        for name in self._specs:
            self.get(name, "scheduling.plugins")

    def get(self, name: str, where: str) -> object:
        plugin = self._built.get(name)
        if plugin is not None:
            return plugin
        if self._sealed:
            raise RuntimeError(f"plugin {name!r} was never built: ask the handle for plugins in a factory")
        if name in self._building:
            raise ConfigError(f"field `{where}`: plugins depend on each other in a cycle: {self._building}")
        entry = self._specs.get(name)
        if entry is not None:
            i, spec = entry
            type_name, params, where = spec.type, spec.params, f"scheduling.plugins[{i}].type"
        else:
            type_name, params = name, {}
        self._building.append(name)
        try:
            plugin = self._built[name] = PLUGINS.build(type_name, name, params, self._handle, where)
        finally:
            self._building.pop()
        return plugin

    def _dependency(self, name: str) -> object:
        """A plugin asked the handle for another one (`handle.plugin(name)`)."""
        by = self._building[-1] if self._building else "a plugin"
        return self.get(name, f"scheduling.plugins (a dependency of {by!r})")

    def weight(self, name: str) -> float:
        """The configured default weight of a scorer listed in a profile's `plugins`."""
        entry = self._specs.get(name)
        return entry[1].weight if entry is not None else 1.0

    def seal(self) -> list[object]:
        """Every instance; from now on nothing new is built (its hooks would never be called)."""
        self._sealed = True
        return list(self._built.values())
