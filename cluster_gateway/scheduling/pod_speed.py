"""How much faster one pod computes prefill than another, from an annotation the operator sets.

Why an annotation: in a pool of mixed GPUs (H100 next to L4) an H100 computes the same prompt about
9x faster, and no count the gateway keeps (queue, in-flight, tokens sent) can tell. Engines export no
figure of their own speed; their prefill-time histograms mix in each pod's cache hit rate, which the
routing itself changes. The operator knows which deployment runs on which GPU, so each pod template
says `fleetgate.io/prefill-tokens-per-second` (a benchmark's or a vendor's figure; static endpoints
take the same annotation). Only ratios are used: relative to the slowest annotated pod, so the
scores of a pool whose pods all say the same (or nothing) are exactly what they were without it.
"""

from __future__ import annotations

import math
from collections.abc import Iterable

from cluster_gateway.pool import PodState

SPEED_ANNOTATION = "fleetgate.io/prefill-tokens-per-second"


def relative_speeds(pods: Iterable[PodState]) -> dict[str, float]:
    """Pod → prefill speed relative to the slowest annotated pod (>= 1). Pods without a valid
    annotation count as the slowest. Empty when fewer than two speeds differ: nothing to weigh."""
    declared: dict[str, float] = {}
    names: list[str] = []
    for p in pods:
        names.append(p.name)
        raw = p.endpoint.annotations.get(SPEED_ANNOTATION)
        if raw is None:
            continue
        try:
            v = float(raw)
        except ValueError:
            continue
        if math.isfinite(v) and v > 0:
            declared[p.name] = v
    if not declared:
        return {}
    slowest = min(declared.values())
    if max(declared.values()) == slowest:
        return {}
    return {n: declared.get(n, slowest) / slowest for n in names}
