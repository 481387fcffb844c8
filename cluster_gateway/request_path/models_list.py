"""`GET /v1/models` for the whole pool, in vLLM's shape, shared by the proxy and the ext_proc picker.

Adapters keep the `parent` (and `root`) the pods reported, so clients that tell LoRA adapters from
base models by `parent` (as vLLM clients do) see the same thing through the gateway.
"""

from __future__ import annotations

from typing import Any

import msgspec

from cluster_gateway.pool import EndpointPool


def models_listing(pool: EndpointPool) -> bytes:
    entries: dict[str, dict[str, Any]] = {}
    for pod in pool.pods():
        for name in pod.models:
            entry = entries.setdefault(
                name, {"id": name, "object": "model", "created": 0, "owned_by": "fleetgate"}
            )
            parent = pod.adapter_parents.get(name)
            if parent and "parent" not in entry:
                entry["parent"] = parent
                entry["root"] = parent
    return msgspec.json.encode({"object": "list", "data": [entries[k] for k in sorted(entries)]})
