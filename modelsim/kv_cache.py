"""Paged KV cache with automatic prefix caching, block-accounted like vLLM's block pool.

A request holds a list of blocks. A full prompt block carries a chained hash (hash of the parent
block's hash, the block's text and the LoRA adapter), so two prompts share cached blocks exactly
as far as their prefixes match. Freed hashed blocks stay cached, unreferenced, in an LRU queue and
count as free: they are reused by a later hit or evicted (oldest first) when a fresh block is needed.

With `record_events`, the cache also notes what vLLM's KV-event publisher would say (a block got a
hash: BlockStored with its token ids; an unreferenced block was evicted or reset: BlockRemoved); the
engine publishes `take_events()` once per step.
"""

from __future__ import annotations

from collections import OrderedDict
from typing import Protocol

from common.kv_events import MEDIUM_GPU, BlockRemoved, BlockStored


class BlockOwner(Protocol):
    block_hashes: list[int]  # hashes of the full prompt blocks
    blocks: list[int | None]  # allocated blocks: the hash, or None for an unhashed block
    token_ids: list[int]  # prompt token ids (only kept when KV events are published)
    lora: str | None


def prompt_block_hashes(text: str, block_size: int, chars_per_token: int, extra: str | None) -> list[int]:
    """Chained hashes of the prompt's full blocks (a partial last block is never cached)."""
    step = block_size * chars_per_token
    full = len(text) // step
    hashes: list[int] = []
    parent = hash(("fleetgate-sim-root", extra))
    for i in range(full):
        parent = hash((parent, text[i * step : (i + 1) * step]))
        hashes.append(parent)
    return hashes


class KVCache:
    def __init__(
        self,
        num_blocks: int,
        block_size: int,
        enable_prefix_caching: bool = True,
        record_events: bool = False,
        lora_ids: dict[str, int] | None = None,
    ) -> None:
        self.num_blocks = num_blocks
        self.block_size = block_size
        self.enable_prefix_caching = enable_prefix_caching
        self._free_uncached = num_blocks
        self._ref: dict[int, int] = {}  # cached hash -> holders (0 = cached but evictable)
        self._evictable: OrderedDict[int, None] = OrderedDict()
        self.evictions = 0
        self.record_events = record_events and enable_prefix_caching
        self._events: list[BlockStored | BlockRemoved] = []
        self._lora_ids = lora_ids if lora_ids is not None else {}

    def take_events(self) -> list[BlockStored | BlockRemoved]:
        """What changed since the last call, in order (vLLM publishes this once per step)."""
        ev, self._events = self._events, []
        return ev

    # -- accounting ---------------------------------------------------------------------------
    @property
    def num_free(self) -> int:
        return self._free_uncached + len(self._evictable)

    @property
    def num_used(self) -> int:
        return self.num_blocks - self.num_free

    @property
    def num_cached(self) -> int:
        return len(self._ref)

    def usage(self) -> float:
        return self.num_used / self.num_blocks if self.num_blocks else 0.0

    def blocks_for(self, tokens: int) -> int:
        return -(-tokens // self.block_size)

    # -- prefix lookup ------------------------------------------------------------------------
    def count_hits(self, hashes: list[int], max_blocks: int) -> int:
        """Leading blocks of `hashes` already cached (at most max_blocks)."""
        if not self.enable_prefix_caching:
            return 0
        n = 0
        ref = self._ref
        for h in hashes[:max_blocks]:
            if h not in ref:
                break
            n += 1
        return n

    # -- allocation ---------------------------------------------------------------------------
    def admit(self, req: BlockOwner, hit_blocks: int, tokens: int) -> bool:
        """Take the hit blocks and allocate the rest for `tokens`; all or nothing."""
        hits = req.block_hashes[:hit_blocks]
        evictable_hits = sum(1 for h in hits if self._ref.get(h) == 0)
        if self.blocks_for(tokens) - hit_blocks + evictable_hits > self.num_free:
            return False
        for h in hits:
            self._take_ref(h)
        req.blocks = list(hits)
        ok = self.grow(req, tokens)
        assert ok
        return True

    def grow(self, req: BlockOwner, tokens: int) -> bool:
        """Make the request's blocks cover `tokens`; False (nothing taken) if the pool is short."""
        need = self.blocks_for(tokens) - len(req.blocks)
        if need <= 0:
            return True
        if need > self.num_free:
            return False
        hashes = req.block_hashes
        blocks = req.blocks
        stored_from = -1
        stored: list[int] = []
        for _ in range(need):
            idx = len(blocks)
            h = hashes[idx] if idx < len(hashes) and self.enable_prefix_caching else None
            if h is not None and h in self._ref:
                self._take_ref(h)  # computed meanwhile by another request: share it
            else:
                self._take_free()
                if h is not None:
                    self._ref[h] = 1
                    if self.record_events:
                        if stored and stored_from + len(stored) != idx:
                            self._stored(req, stored_from, stored)
                            stored = []
                        if not stored:
                            stored_from = idx
                        stored.append(h)
            blocks.append(h)
        if stored:
            self._stored(req, stored_from, stored)
        return True

    def _stored(self, req: BlockOwner, first: int, hashes: list[int]) -> None:
        bs = self.block_size
        lora = req.lora
        self._events.append(
            BlockStored(
                block_hashes=hashes,
                parent_block_hash=req.block_hashes[first - 1] if first > 0 else None,
                token_ids=req.token_ids[first * bs : (first + len(hashes)) * bs],
                block_size=bs,
                lora_id=self._lora_ids.get(lora) if lora else None,
                medium=MEDIUM_GPU,
                lora_name=lora,
            )
        )

    def _removed(self, h: int) -> None:
        ev = self._events
        if ev and isinstance(ev[-1], BlockRemoved):
            ev[-1].block_hashes.append(h)
        else:
            ev.append(BlockRemoved(block_hashes=[h], medium=MEDIUM_GPU))

    def free(self, req: BlockOwner) -> None:
        """Release a request's blocks; the tail is freed first so it is evicted first."""
        for h in reversed(req.blocks):
            if h is None:
                self._free_uncached += 1
                continue
            left = self._ref[h] - 1
            self._ref[h] = left
            if left == 0:
                self._evictable[h] = None
        req.blocks = []

    def _take_ref(self, h: int) -> None:
        if self._ref[h] == 0:
            del self._evictable[h]
        self._ref[h] += 1

    def _take_free(self) -> None:
        if self._free_uncached > 0:
            self._free_uncached -= 1
            return
        h, _ = self._evictable.popitem(last=False)  # LRU unreferenced cached block
        del self._ref[h]
        self.evictions += 1
        if self.record_events:
            self._removed(h)

    def reset_prefix_cache(self) -> None:
        """Forget every unreferenced cached block (vLLM's /reset_prefix_cache)."""
        for h in self._evictable:
            del self._ref[h]
            if self.record_events:
                self._removed(h)
        self._free_uncached += len(self._evictable)
        self._evictable.clear()
