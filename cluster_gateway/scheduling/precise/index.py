"""What each pod's KV cache really holds, rebuilt from its KV events, and when that view can be trusted.

`PodCache` is one pod's block set plus the bookkeeping that decides whether it is complete:

- `trusted`: every batch since the engine's first (seq 0) or since an AllBlocksCleared was applied
  in order, and the engine's hashing was checked to match ours. No false positives, no false negatives
  (up to the events still in flight).
- `partial`: the stream was joined late (first batch seen had seq > 0 and replay could not supply the
  start) but nothing was missed since: every block in the set is really cached, some cached blocks
  are unknown. The scorer combines it with the approximate index.
- `gapped`: batches were lost and not replayed: a BlockRemoved may be missing, so the set may claim
  blocks the engine evicted. Not used until an AllBlocksCleared (or an engine restart) resets it.
- `mismatch`: the engine hashes blocks differently (algorithm, seed or block size): its hashes will
  never match ours, so the pod is scored by the approximate index only.

Pure state, no I/O: the subscriber feeds it batches with their sequence numbers.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence

from common.kv_events import Cleared, Event, Removed, Stored

log = logging.getLogger("fleetgate.kv_events")

TRUSTED = "trusted"
PARTIAL = "partial"
GAPPED = "gapped"
MISMATCH = "mismatch"
SYNCING = "syncing"  # nothing received yet

# verify(block_size, token_ids, lora, hashes) -> True when our hashing reproduces `hashes`
Verifier = Callable[[int, Sequence[int], str | None, Sequence[int]], bool]


class PodCache:
    def __init__(self, pod: str, verify: Verifier, max_blocks: int = 2_000_000) -> None:
        self.pod = pod
        self._verify = verify
        self.max_blocks = max_blocks
        self.blocks: set[int] = set()
        self.state = SYNCING
        self.complete = False  # the set started from an empty cache (seq 0 or AllBlocksCleared)
        self.verified = False  # a chain-start block's hashes were reproduced
        self.next_seq: int | None = None
        self.batches = 0
        self.gaps = 0
        self.restarts = 0

    # -- sequence handling ---------------------------------------------------------------------
    def apply(self, seq: int, events: Sequence[Event]) -> None:
        """Apply one batch in order (a live one, or a replayed one that fills a gap)."""
        if self.next_seq is None:
            self.complete = seq == 0
            self.state = PARTIAL
        elif seq != self.next_seq:
            raise ValueError(f"batch {seq} applied out of order (expected {self.next_seq})")
        self.next_seq = seq + 1
        self.batches += 1
        for ev in events:
            if isinstance(ev, Stored):
                self._stored(ev)
            elif isinstance(ev, Removed):
                self.blocks.difference_update(ev.hashes)
            elif isinstance(ev, Cleared):
                self.blocks.clear()
                self.complete = True
                if self.state == GAPPED:
                    self.state = PARTIAL
        self._settle()

    def restart(self) -> None:
        """The engine's publisher started over (a new process): its cache started empty too."""
        self.restarts += 1
        self.blocks.clear()
        self.next_seq = None
        if self.state != MISMATCH:
            self.state = SYNCING

    def lost(self, upto: int) -> None:
        """Batches before `upto` are gone for good (replay failed or did not reach back)."""
        self.gaps += 1
        self.next_seq = upto
        if self.state != MISMATCH:
            self.state = GAPPED
            self.complete = False
            log.info(
                "kv events of %s: batches lost before %d; untrusted until the cache is cleared",
                self.pod,
                upto,
            )

    def _stored(self, ev: Stored) -> None:
        if self.state == MISMATCH:
            return
        if ev.parent is None and ev.hashes and not self.verified:
            if self._verify(ev.block_size, ev.token_ids, ev.lora_name, ev.hashes):
                self.verified = True
            else:
                self.state = MISMATCH
                self.blocks.clear()
                log.warning(
                    "kv events of %s: block hashes do not match the gateway's (hash algorithm, "
                    "PYTHONHASHSEED, block size or tokenizer differ); scoring it by the approximate index",
                    self.pod,
                )
                return
        if len(self.blocks) + len(ev.hashes) > self.max_blocks:
            self.lost(self.next_seq or 0)  # more than an engine can hold: treat as corrupt
            return
        self.blocks.update(ev.hashes)

    def _settle(self) -> None:
        if self.state in (MISMATCH, GAPPED):
            return
        self.state = TRUSTED if self.complete and self.verified else PARTIAL

    # -- lookup -----------------------------------------------------------------------------------
    def matched(self, hashes: Sequence[int]) -> int:
        """Leading blocks of `hashes` this pod holds."""
        blocks = self.blocks
        n = 0
        for h in hashes:
            if h not in blocks:
                break
            n += 1
        return n
