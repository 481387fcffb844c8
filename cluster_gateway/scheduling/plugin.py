"""Tier 1 scheduling plugins: the hooks a plugin may define, the handle it is built with, the registry.

A plugin is any object built by `factory(name, params, handle)` (registered in `PLUGINS`, or loaded
from the `fleetgate.plugins` entry-point group). It defines only the hooks it needs:

- `prepare(ctx, pods)`: once per decision, before the filters (derive per-request data).
- `filter(ctx, pods) -> list[PodState] | Filtered`: narrow the candidates. Class attribute
  `strict = True` says the pods it removes may never be tried, not even as a last resort.
- `score(ctx, pods) -> list[float]`: rate every candidate in [0, 1], higher is better.
- `pick(ctx, scored) -> list[PodState]`: ranked choice plus fallbacks from `(pod, total)` pairs.
- `on_dispatch(req, pod)`: the request is going to `pod` (state the gateway itself causes).
- `on_complete(req, pod, outcome)`: the request ended (`outcome` is the data path's word for it).
- `on_pods_changed(pods)`: pool membership, a pod's labels or the model catalog changed; drop state
  of departed pods, rebuild indexes (e.g. pods by served model).

For large pools (`scheduling.twoStage`) the scheduler decides over a sample of the candidates
(`two_stage.py`); three more optional members take part:

- `candidates(ctx, pods) -> list[PodState]`: a strict filter's answer over the whole pool from an
  index, O(answer); the sample is drawn from it.
- `nominate(ctx, limit) -> Iterable[str]`: names of up to `limit` pods whose score could stand out
  (prefix holders, prefix homes, adapter holders); they join the sample.
- class attribute `whole_pool = True`: the plugin needs every candidate (round-robin), so its
  profiles are never sampled.

Plugins own their state (the prefix index, the adapter memory); the scheduler core knows hooks,
never names or types. A plugin that needs another one asks the handle: `handle.plugin(name)`
returns the scheduler's single instance of that name, so two scorers share one index.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from cluster_gateway.pool import EndpointPool, PodState
from cluster_gateway.scheduling.adapter_memory import AdapterEvidence
from common.config.gateway import Scheduling
from common.plugins import PluginRegistry


@dataclass(slots=True)
class Filtered:
    """A filter's answer when it has more to say than the pods it kept.

    `degraded`: no candidate has trustworthy metrics, score on live counts only (the profile's
    degraded scorers). `saturated`: every candidate is saturated and the filter failed open; the
    caller may queue or shed the request.
    """

    pods: list[PodState]
    degraded: bool = False
    saturated: bool = False


@dataclass(slots=True)
class SchedulingHandle:
    """What a scheduler lends its plugins at build time."""

    pool: EndpointPool
    config: Scheduling
    clock: Callable[[], float]
    rng: random.Random
    dead_after_failures: int
    evidence: AdapterEvidence = field(default_factory=AdapterEvidence)
    _resolve: Callable[[str], object] | None = field(default=None, repr=False)

    def plugin(self, name: str) -> object:
        """The scheduler's instance named `name` (configured, else the built-in type of that name).

        Call it from a factory: once the scheduler is built, no new instance is made (RuntimeError)."""
        if self._resolve is None:
            raise RuntimeError("this handle is not attached to a scheduler's plugin set")
        return self._resolve(name)


PluginFactory = Callable[[str, Mapping[str, Any], SchedulingHandle], object]

PLUGINS: PluginRegistry[SchedulingHandle, object] = PluginRegistry("scheduling plugin")


def register_plugin(type_name: str, factory: PluginFactory) -> None:
    """Make `type_name` usable in config (`scheduling.plugins[].type`, or directly by name in profiles)."""
    PLUGINS.register(type_name, factory)


class PluginBase:
    """Optional convenience base: keeps `name`, `params` and the handle. Hooks are not defined here,
    so the scheduler only calls what a subclass implements."""

    def __init__(self, name: str, params: Mapping[str, Any], handle: SchedulingHandle) -> None:
        self.name = name
        self.params = dict(params)
        self.handle = handle
