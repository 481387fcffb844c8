"""A prompt prefix's "home" pods, the same in every gateway replica without sharing any state.

Each replica's prefix index only knows where *it* sent a prompt, so with several replicas the first
requests of a new shared prefix scatter over as many pods as there are replicas, and each pod then
pays the prefill (a known weakness of approximate prefix routing under active-active HA). A
consistent-hash ring over pod names, keyed by a stable checksum of the prompt's leading blocks, gives
every replica the same preferred pods for the same prefix; scored lightly and faded by load, it only
decides between otherwise comparable pods, and when a pod joins or leaves only ~1/N of the prefixes
move. Python's `hash()` is salted per process, so the key and ring points use CRC-32 instead.
"""

from __future__ import annotations

from common.hashring import VNODES, HashRing
from common.hashring import point as _point

__all__ = ["VNODES", "HashRing", "prefix_key"]


def prefix_key(text: str, block_chars: int, blocks: int) -> int | None:
    """Stable key of the first `blocks` full blocks (fewer if the prompt is shorter); None below one."""
    n = min(len(text) // block_chars, blocks)
    if n == 0:
        return None
    return _point(text[: n * block_chars])
