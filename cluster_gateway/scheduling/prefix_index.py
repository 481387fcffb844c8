"""An approximate map of which pod holds which prompt prefix in its KV cache.

The gateway cannot see a pod's prefix cache, so it remembers where it sent each prompt: a pod that
served a prompt very likely still caches its leading blocks. Prompts are cut into fixed-size character
blocks and hashed as a chain (each hash covers the block and everything before it), so one hash
identifies a whole prefix and a lookup walks blocks until pods stop matching. Memory is bounded per pod
with LRU eviction, roughly like the engine's own cache.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Iterable, Sequence

_ROOT = 0x5EED


def block_hashes(text: str, block_chars: int, max_blocks: int) -> tuple[int, ...]:
    """Chained hashes of the first `max_blocks` full blocks of `text` (a partial tail block is not cached)."""
    n = min(len(text) // block_chars, max_blocks)
    out: list[int] = []
    h = _ROOT
    for i in range(0, n * block_chars, block_chars):
        h = hash((h, text[i : i + block_chars]))
        out.append(h)
    return tuple(out)


class PrefixIndex:
    """Per pod, an LRU set of block hashes; globally, hash → pods holding it (for fast matching)."""

    def __init__(self, max_blocks_per_pod: int) -> None:
        if max_blocks_per_pod < 1:
            raise ValueError("max_blocks_per_pod must be >= 1")
        self.max_blocks_per_pod = max_blocks_per_pod
        self._pod_blocks: dict[str, OrderedDict[int, None]] = {}
        self._holders: dict[int, set[str]] = {}

    def add(self, pod_name: str, hashes: Sequence[int]) -> None:
        """Record that `pod_name` now caches these blocks (most recently used)."""
        if not hashes:
            return
        lru = self._pod_blocks.get(pod_name)
        if lru is None:
            lru = self._pod_blocks[pod_name] = OrderedDict()
        holders = self._holders
        for h in hashes:
            if h in lru:
                lru.move_to_end(h)
                continue
            lru[h] = None
            s = holders.get(h)
            if s is None:
                holders[h] = {pod_name}
            else:
                s.add(pod_name)
        overflow = len(lru) - self.max_blocks_per_pod
        for _ in range(max(0, overflow)):
            old, _none = lru.popitem(last=False)
            s = holders.get(old)
            if s is not None:
                s.discard(pod_name)
                if not s:
                    del holders[old]

    def match(self, hashes: Sequence[int]) -> dict[str, int]:
        """Longest matched prefix, in blocks, per pod that holds at least the first block."""
        if not hashes:
            return {}
        holders = self._holders
        first = holders.get(hashes[0])
        if not first:
            return {}
        result: dict[str, int] = {}
        alive = set(first)
        for i in range(1, len(hashes)):
            nxt = holders.get(hashes[i])
            if not nxt:
                break
            kept = alive & nxt
            if len(kept) != len(alive):
                for pod in alive - kept:
                    result[pod] = i
                if not kept:
                    return result
            alive = kept
        else:
            i = len(hashes)
        for pod in alive:
            result[pod] = i
        return result

    def remove_pod(self, name: str) -> None:
        """Forget a pod that left the pool."""
        lru = self._pod_blocks.pop(name, None)
        if lru is None:
            return
        holders = self._holders
        for h in lru:
            s = holders.get(h)
            if s is not None:
                s.discard(name)
                if not s:
                    del holders[h]

    def retain_pods(self, names: Iterable[str]) -> None:
        """Forget every pod not in `names` (after a membership change)."""
        keep = set(names)
        for name in [n for n in self._pod_blocks if n not in keep]:
            self.remove_pod(name)

    def pods(self) -> list[str]:
        return list(self._pod_blocks)

    def blocks_of(self, pod_name: str) -> int:
        lru = self._pod_blocks.get(pod_name)
        return len(lru) if lru is not None else 0

    def total_blocks(self) -> int:
        return sum(len(v) for v in self._pod_blocks.values())
