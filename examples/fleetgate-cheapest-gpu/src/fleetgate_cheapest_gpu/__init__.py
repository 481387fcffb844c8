"""Prefer pods on cheaper GPUs: an example Fleetgate scheduling plugin, installed from its own package."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from cluster_gateway.pool import PodState
from cluster_gateway.scheduling import PluginBase, SchedulingContext, SchedulingHandle

DEFAULT_LABEL = "fleetgate.io/gpu"


class CheapestGpuScorer(PluginBase):
    """Cheaper GPUs first: a pod scores the cheapest candidate's $/GPU-hour divided by its own.

    Params: `prices` (GPU type → $ per GPU-hour, required), `label` (the pod label naming its GPU
    type, default `fleetgate.io/gpu`), `unknownPrice` (for pods without a listed type; default the
    dearest listed price, so an unlabelled pod is never preferred).
    """

    def __init__(self, name: str, params: Mapping[str, Any], handle: SchedulingHandle) -> None:
        super().__init__(name, params, handle)
        prices = params.get("prices")
        if not isinstance(prices, Mapping) or not prices:
            raise ValueError("`prices` must map GPU types to $ per GPU-hour")
        self.prices: dict[str, float] = {}
        for gpu, price in prices.items():
            if isinstance(price, bool) or not isinstance(price, int | float) or price <= 0:
                raise ValueError(f"`prices.{gpu}` must be a positive number, got {price!r}")
            self.prices[str(gpu)] = float(price)
        self.label = str(params.get("label", DEFAULT_LABEL))
        self.unknown_price = float(params.get("unknownPrice", max(self.prices.values())))
        self._price_of: dict[str, float] = {}

    def _price(self, pod: PodState) -> float:
        return self.prices.get(pod.endpoint.labels.get(self.label, ""), self.unknown_price)

    def on_pods_changed(self, pods: list[PodState]) -> None:
        """Labels change only with pool membership or a pod update: price every pod once then."""
        self._price_of = {p.name: self._price(p) for p in pods}

    def score(self, ctx: SchedulingContext, pods: list[PodState]) -> list[float]:
        get = self._price_of.get
        prices = [get(p.name) or self._price(p) for p in pods]
        cheapest = min(prices)
        return [cheapest / x for x in prices]
