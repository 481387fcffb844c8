"""The plugin machinery both tiers share: a registry of plugin types, built from config specs.

A plugin type is a factory `factory(name, params, handle) -> plugin`, usually the plugin class
itself: `name` is the instance's name in config (profiles refer to it), `params` its free-form
`params` mapping, `handle` what the tier lends its plugins (the pod pool, shared services). A tier
keeps one `PluginRegistry` per kind of plugin and never branches on plugin types: what a plugin does
is the set of hooks it defines.

Third-party types need no change to this repository: a distribution declares entry points in the
group `fleetgate.plugins` (`cheapest_gpu = "fleetgate_cheapest_gpu:CheapestGpuScorer"`), and a
registry resolves a type it does not know by that name, on first use.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from importlib.metadata import entry_points
from typing import Any, Generic, TypeVar

from common.config import ConfigError

ENTRY_POINT_GROUP = "fleetgate.plugins"

P = TypeVar("P")
H = TypeVar("H")

PluginFactory = Callable[[str, Mapping[str, Any], H], P]


def has_hook(plugin: object, hook: str) -> bool:
    """Whether `plugin` implements `hook` (a plugin defines only the hooks it needs)."""
    return callable(getattr(plugin, hook, None))


def param(
    params: Mapping[str, Any], key: str, default: Any, kind: type | tuple[type, ...], where: str
) -> Any:
    """`params[key]` checked against `kind`, or `default`; a ConfigError names the field otherwise."""
    if key not in params:
        return default
    v = params[key]
    if isinstance(v, bool) and kind in (int, float, (int, float)):
        raise ConfigError(f"field `{where}.params.{key}`: expected a number, got {v!r}")
    if not isinstance(v, kind):
        want = kind.__name__ if isinstance(kind, type) else " or ".join(k.__name__ for k in kind)
        raise ConfigError(f"field `{where}.params.{key}`: expected {want}, got {v!r}")
    return v


class PluginRegistry(Generic[H, P]):
    """Plugin type name → factory, with the `fleetgate.plugins` entry points as a fallback."""

    def __init__(self, kind: str, group: str = ENTRY_POINT_GROUP) -> None:
        self.kind = kind  # e.g. "scheduling plugin", for error messages
        self.group = group
        self._factories: dict[str, PluginFactory[H, P]] = {}

    def register(self, type_name: str, factory: PluginFactory[H, P]) -> None:
        self._factories[type_name] = factory

    def __contains__(self, type_name: object) -> bool:
        return isinstance(type_name, str) and self.factory(type_name) is not None

    def names(self) -> list[str]:
        """Built-in and already loaded types (entry points are loaded by name, on demand)."""
        return sorted(self._factories)

    def factory(self, type_name: str) -> PluginFactory[H, P] | None:
        f = self._factories.get(type_name)
        if f is None:
            f = self._from_entry_point(type_name)
            if f is not None:
                self._factories[type_name] = f
        return f

    def _from_entry_point(self, type_name: str) -> PluginFactory[H, P] | None:
        for ep in entry_points(group=self.group, name=type_name):
            try:
                loaded: PluginFactory[H, P] = ep.load()
            except Exception as e:  # a broken third-party package must name itself
                raise ConfigError(
                    f"{self.kind} type {type_name!r}: entry point {ep.value!r} failed to load: {e}"
                ) from e
            return loaded
        return None

    def build(self, type_name: str, name: str, params: Mapping[str, Any], handle: H, where: str) -> P:
        """One plugin instance; ConfigError (naming `where`) for an unknown type or bad params."""
        f = self.factory(type_name)
        if f is None:
            raise ConfigError(
                f"field `{where}`: unknown {self.kind} {type_name!r} (known: {', '.join(self.names())}; "
                f"others load from entry-point group `{self.group}`)"
            )
        try:
            return f(name, params, handle)
        except ConfigError:
            raise
        except (TypeError, ValueError, KeyError) as e:
            raise ConfigError(f"field `{where}`: {self.kind} {type_name!r} rejected its params: {e}") from e
