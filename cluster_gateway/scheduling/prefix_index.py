"""An approximate map of which pod holds which prompt prefix in its KV cache.

The gateway cannot see a pod's prefix cache, so it remembers where it sent each prompt: a pod that
served a prompt very likely still caches its leading blocks. Prompts are cut into fixed-size character
blocks and hashed as a chain (each hash covers the block and everything before it), so one hash
identifies a whole prefix and a lookup walks blocks until pods stop matching. Memory is bounded per pod
(roughly like the engine's own cache) and by a byte budget over all pods, with LRU eviction.
"""

from __future__ import annotations

import heapq
from collections import OrderedDict
from collections.abc import Iterable, Sequence

_ROOT = 0x5EED


def block_hashes(text: str, block_chars: int, max_blocks: int, adapter: str | None = None) -> tuple[int, ...]:
    """Chained hashes of the first `max_blocks` full blocks of `text` (a partial tail block is not cached).

    `adapter` seeds the chain: engines keep a LoRA adapter's KV blocks apart from the base model's
    (vLLM puts the adapter in each block hash's extra keys, SGLang's radix tree is per adapter), so a
    prompt cached for the base model is cold for an adapter, and the other way round."""
    n = min(len(text) // block_chars, max_blocks)
    out: list[int] = []
    h = _ROOT if adapter is None else hash((_ROOT, adapter))
    for i in range(0, n * block_chars, block_chars):
        h = hash((h, text[i : i + block_chars]))
        out.append(h)
    return tuple(out)


BYTES_PER_BLOCK = 300  # measured 195-290 (tracemalloc, churn; more for small per-pod LRUs): docs/scale.md
DEFAULT_MAX_BYTES = 256 * 1024 * 1024
DEFAULT_MAX_TOTAL_BLOCKS = DEFAULT_MAX_BYTES // BYTES_PER_BLOCK
_SET_AT = 5  # holders kept in a tuple up to this many pods (56-88 bytes), a set beyond (216+)

Holders = str | tuple[str, ...] | set[str]


class PrefixIndex:
    """Per pod, an LRU of block hashes; globally, hash → pods holding it (for fast matching).

    Memory is bounded twice: `max_blocks_per_pod` per pod (about what one engine's KV cache holds),
    and `max_total_blocks` over all pods (a byte budget divided by the measured bytes per block,
    `for_bytes`). Over the budget, the globally least recently used blocks go first, whichever pod
    holds them: every pod's entries age on the same clock, so a pod that served recently keeps its
    prefixes and one that went quiet gives its share back (no fixed share per pod that 1,000 pods
    would shrink to nothing). A hash held by one pod (most of them) maps to the pod's name, by a
    few to a tuple, by many to a set.
    """

    def __init__(self, max_blocks_per_pod: int, max_total_blocks: int = DEFAULT_MAX_TOTAL_BLOCKS) -> None:
        if max_blocks_per_pod < 1 or max_total_blocks < 1:
            raise ValueError("max_blocks_per_pod and max_total_blocks must be >= 1")
        self.max_blocks_per_pod = max_blocks_per_pod
        self.max_total_blocks = max_total_blocks
        self._pod_blocks: dict[str, OrderedDict[int, int]] = {}  # pod → hash → stamp of last use
        self._holders: dict[int, Holders] = {}
        self._stamp = 0  # one tick per `add`: the shared clock of every pod's LRU
        self._total = 0
        self._oldest: list[tuple[int, str]] = []  # heap of (a lower bound of a pod's oldest stamp, pod)

    @classmethod
    def for_bytes(cls, max_bytes: int, max_blocks_per_pod: int) -> PrefixIndex:
        """An index whose blocks stay within `max_bytes` of memory (BYTES_PER_BLOCK each)."""
        return cls(max_blocks_per_pod, max(1, max_bytes // BYTES_PER_BLOCK))

    def add(self, pod_name: str, hashes: Sequence[int]) -> None:
        """Record that `pod_name` now caches these blocks (most recently used)."""
        if not hashes:
            return
        self._stamp += 1
        stamp = self._stamp
        lru = self._pod_blocks.get(pod_name)
        if lru is None:
            lru = self._pod_blocks[pod_name] = OrderedDict()
            heapq.heappush(self._oldest, (stamp, pod_name))
        holders = self._holders
        added = 0
        for h in reversed(hashes):  # the head ends most recently used: evicted last
            if h in lru:
                lru[h] = stamp
                lru.move_to_end(h)
                continue
            lru[h] = stamp
            added += 1
            cur = holders.get(h)
            if cur is None:
                holders[h] = pod_name
            elif isinstance(cur, str):
                holders[h] = (cur, pod_name)
            elif isinstance(cur, tuple):
                holders[h] = (*cur, pod_name) if len(cur) < _SET_AT else {*cur, pod_name}
            else:
                cur.add(pod_name)
        self._total += added
        for _ in range(len(lru) - self.max_blocks_per_pod):
            self._evict_head(pod_name, lru)
        while self._total > self.max_total_blocks:
            self._evict_oldest()

    def _evict_head(self, pod_name: str, lru: OrderedDict[int, int]) -> None:
        old, _stamp = lru.popitem(last=False)
        self._total -= 1
        self._drop_holder(old, pod_name)

    def _evict_oldest(self) -> None:
        """Drop the least recently used block of the whole index (lazy heap of each pod's oldest)."""
        heap = self._oldest
        while heap:
            stamp, name = heap[0]
            lru = self._pod_blocks.get(name)
            if not lru:  # the pod left, or has nothing left
                heapq.heappop(heap)
                continue
            head = lru[next(iter(lru))]
            if head != stamp:  # its oldest block was used again since: re-file it
                heapq.heapreplace(heap, (head, name))
                continue
            self._evict_head(name, lru)
            if lru:
                heapq.heapreplace(heap, (lru[next(iter(lru))], name))
            else:
                heapq.heappop(heap)
            return

    def _drop_holder(self, h: int, pod_name: str) -> None:
        cur = self._holders.get(h)
        if cur is None:
            return
        if isinstance(cur, str):
            if cur == pod_name:
                del self._holders[h]
            return
        if isinstance(cur, tuple):
            rest = tuple(p for p in cur if p != pod_name)
        else:
            cur.discard(pod_name)
            if len(cur) > _SET_AT:
                return
            rest = tuple(cur)
        if not rest:
            del self._holders[h]
        else:
            self._holders[h] = rest[0] if len(rest) == 1 else rest

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
        alive: set[str] | tuple[str, ...] = first
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
                kept = set(alive).intersection(nxt)
                result.update(dict.fromkeys([p for p in alive if p not in kept], i))
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
        self._total -= len(lru)
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
        return self._total
