"""Garbage-collector settings for Fleetgate's long-running servers.

Why: with CPython's default thresholds (700, 10, 10) a young collection runs every 700 net
allocations, and a request in flight keeps its scope, tasks and buffers alive across several of
them, so at high concurrency those objects are promoted and the older generations are collected
over and over. Measured on the embedded proxy (one process, wrk, static backend): CPU per request
rose 21-24% from concurrency 8 to 128 with the defaults, 6-9% with the collector off, and -5% to
+6% with `gc.freeze()` plus thresholds (10000, 10, 10) (`bench/RESULTS.md`, "CPU flat"). Freezing
moves everything alive at start-up (modules, config, clients: most of the heap) out of the
collector's sight, so the collections that do run scan only what requests created.

Nothing is disabled: reference counting frees most garbage at once, and cycles are still collected,
only in larger batches. `FLEETGATE_GC=default` keeps the interpreter's settings (for comparison).
"""

from __future__ import annotations

import gc
import os

SERVING_THRESHOLDS = (10_000, 10, 10)


def tune_for_serving(env: dict[str, str] | None = None) -> bool:
    """Collect, freeze what start-up left alive, raise the thresholds; False when told not to."""
    if env is None:
        env = dict(os.environ)
    if env.get("FLEETGATE_GC", "") == "default":
        return False
    gc.collect()
    gc.freeze()
    gc.set_threshold(*SERVING_THRESHOLDS)
    return True
