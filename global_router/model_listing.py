"""`GET /v1/models` at the router: the models of routable clusters, in the gateways' (vLLM's) shape.

Adapters carry `parent` and `root` (their base model), as the gateways and vLLM list them, so a
client telling LoRA adapters from base models by `parent` sees the same through either tier.
`created` is 0, as at the gateways: the router knows no creation time, and a constant keeps the
listing byte-identical across requests and across router replicas behind one load balancer (the
time of the last capacity report, used before, changed every second).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from global_router.fleet_view import ClusterState


def model_entries(clusters: Iterable[ClusterState]) -> dict[str, dict[str, Any]]:
    """Model id -> its OpenAI model object; a name that is a base model anywhere is listed as one."""
    parents: dict[str, str | None] = {}
    adapters: dict[str, str] = {}
    for c in clusters:
        for base, cap in c.models.items():
            parents[base] = None
            for name in cap.adapters:
                adapters.setdefault(name, base)
    for name, base in adapters.items():
        parents.setdefault(name, base)
    out: dict[str, dict[str, Any]] = {}
    for name in sorted(parents):
        entry: dict[str, Any] = {"id": name, "object": "model", "created": 0, "owned_by": "fleetgate"}
        parent = parents[name]
        if parent is not None:
            entry["parent"] = parent
            entry["root"] = parent
        out[name] = entry
    return out
