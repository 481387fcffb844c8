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


DEFAULT_MAX_TOTAL_BLOCKS = 1_000_000  # ~200 bytes each: about 200 MB at the very worst


class PrefixIndex:
    """Per pod, an LRU set of block hashes; globally, hash → pods holding it (for fast matching).

    Memory is bounded twice: `max_blocks_per_pod` per pod, and `max_total_blocks` over all pods (each
    pod's share shrinks as pods join, so 1000 pods cannot hold 1000 x the per-pod bound). A hash
    held by one pod (most of them) maps to the pod's name itself rather than to a set.
    """

    def __init__(self, max_blocks_per_pod: int, max_total_blocks: int = DEFAULT_MAX_TOTAL_BLOCKS) -> None:
        if max_blocks_per_pod < 1 or max_total_blocks < 1:
            raise ValueError("max_blocks_per_pod and max_total_blocks must be >= 1")
        self.max_blocks_per_pod = max_blocks_per_pod
        self.max_total_blocks = max_total_blocks
        self._pod_blocks: dict[str, OrderedDict[int, None]] = {}
        self._holders: dict[int, str | set[str]] = {}

    def _cap(self) -> int:
        return max(1, min(self.max_blocks_per_pod, self.max_total_blocks // max(1, len(self._pod_blocks))))

    def add(self, pod_name: str, hashes: Sequence[int]) -> None:
        """Record that `pod_name` now caches these blocks (most recently used)."""
        if not hashes:
            return
        lru = self._pod_blocks.get(pod_name)
        if lru is None:
            lru = self._pod_blocks[pod_name] = OrderedDict()
            self._trim_all()  # every pod's share just shrank
        holders = self._holders
        for h in reversed(hashes):  # the head ends most recently used: evicted last
            if h in lru:
                lru.move_to_end(h)
                continue
            lru[h] = None
            cur = holders.get(h)
            if cur is None:
                holders[h] = pod_name
            elif isinstance(cur, str):
                holders[h] = {cur, pod_name}
            else:
                cur.add(pod_name)
        self._trim(pod_name, lru, self._cap())

    def _trim(self, pod_name: str, lru: OrderedDict[int, None], cap: int) -> None:
        for _ in range(len(lru) - cap):
            old, _none = lru.popitem(last=False)
            self._drop_holder(old, pod_name)

    def _trim_all(self) -> None:
        cap = self._cap()
        for name, lru in self._pod_blocks.items():
            if len(lru) > cap:
                self._trim(name, lru, cap)

    def _drop_holder(self, h: int, pod_name: str) -> None:
        cur = self._holders.get(h)
        if cur is None:
            return
        if isinstance(cur, str):
            if cur == pod_name:
                del self._holders[h]
            return
        cur.discard(pod_name)
        if len(cur) == 1:
            self._holders[h] = next(iter(cur))
        elif not cur:
            del self._holders[h]

    def match(self, hashes: Sequence[int]) -> dict[str, int]:
        """Longest matched prefix, in blocks, per pod that holds at least the first block.

        Holders of a chain's blocks are nested: a pod got block i with the blocks before it, and
        `add` makes a prompt's head its most recently used blocks, so eviction takes the tail first
        (as vLLM's block pool does) and a pod holding block i still holds every block before it. So
        the walk only does set work where the holder set shrinks; once one pod is left, it walks that
        pod's own LRU. The answer is in nondecreasing order of match length: the longest come last
        (`reversed()` gives the best pods first without sorting)."""
        if not hashes:
            return {}
        holders = self._holders
        first = holders.get(hashes[0])
        if first is None:
            return {}
        n = len(hashes)
        if isinstance(first, str):  # one holder: walk its own LRU, no set algebra
            return {first: self._walk(first, hashes, 1)}
        result: dict[str, int] = {}
        alive: set[str] = first
        i = 1
        while i < n:
            nxt = holders.get(hashes[i])
            if nxt is None:
                break
            if isinstance(nxt, str):
                if nxt not in alive:
                    break
                result.update(dict.fromkeys(alive, i))
                result[nxt] = self._walk(nxt, hashes, i + 1)
                return result
            if len(nxt) < len(alive):  # nested holders: equal size means the same pods
                kept = alive & nxt
                result.update(dict.fromkeys(alive - kept, i))
                if not kept:
                    return result
                alive = kept
            i += 1
        result.update(dict.fromkeys(alive, i))
        return result

    def _walk(self, pod: str, hashes: Sequence[int], i: int) -> int:
        lru = self._pod_blocks[pod]
        n = len(hashes)
        while i < n and hashes[i] in lru:
            i += 1
        return i

    def remove_pod(self, name: str) -> None:
        """Forget a pod that left the pool."""
        lru = self._pod_blocks.pop(name, None)
        if lru is None:
            return
        for h in lru:
            self._drop_holder(h, name)

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
