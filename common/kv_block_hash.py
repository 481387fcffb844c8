"""vLLM's prefix-cache block hashes, computed the same way by the simulator and by the gateway.

vLLM (V1, `prefix_caching_hash_algo=sha256_cbor`) names a full KV block by
`sha256(cbor_canonical((parent_digest, block_token_ids, extra_keys)))`, chained from the previous
block; the first block's parent is `NONE_HASH = sha256(cbor_canonical(PYTHONHASHSEED))`.
`extra_keys` is None for a plain block and `(lora_name,)` for a LoRA adapter's request (multimodal
inputs and cache salts add more; neither exists here). KV events carry the low 64 bits of each
digest, read big-endian (`VLLM_KV_EVENTS_USE_INT_BLOCK_HASHES`, vLLM's default), so that is the
identity this module hands out; the full digests only feed the chain.

Matching a real vLLM needs three things the same on both sides: the token ids (the model's own
tokenizer and chat template — Fleetgate ships only the simulator's, `sim_token_ids`), the hash
algorithm (`sha256_cbor`, checked per pod from its first events) and the seed (PYTHONHASHSEED of the
engine process). The simulator uses exactly this code, so against it the hashes match bit for bit.

Hashing is ~13 µs a block, so `BlockHasher` memoises digests by block content chain: requests that
share a system prompt pay sha256 only for the blocks after the shared part.
"""

from __future__ import annotations

import hashlib
import sys
from array import array
from collections import OrderedDict
from collections.abc import Sequence

import cbor2

from common.tokens import CHARS_PER_TOKEN

U64 = (1 << 64) - 1


def sha256_cbor(obj: object) -> bytes:
    """vLLM's `sha256_cbor`: SHA-256 of the canonical CBOR encoding."""
    return hashlib.sha256(cbor2.dumps(obj, canonical=True)).digest()


def none_hash(seed: str) -> bytes:
    """The first block's parent digest for an engine started with PYTHONHASHSEED=`seed`."""
    return sha256_cbor(seed)


def external(digest: bytes) -> int:
    """The 64-bit form KV events carry (`maybe_convert_block_hash`)."""
    return int.from_bytes(digest, "big") & U64


def block_digest(parent: bytes, tokens: Sequence[int], lora: str | None) -> bytes:
    """One block's digest (`hash_block_tokens`): parent digest, the block's token ids, extra keys."""
    return sha256_cbor((parent, tuple(tokens), (lora,) if lora else None))


def sim_token_ids(text: str) -> list[int]:
    """The simulator's "tokenizer": one token per 4 characters (`common.tokens`), its id the chunk's
    UTF-8 bytes as a little-endian integer (folded to 32 bits when a chunk is not ASCII).

    Deterministic in every process, so the gateway derives the very ids the simulator hashes.
    """
    if not text:
        return []
    try:
        raw = text.encode("ascii")
    except UnicodeEncodeError:
        return [_chunk_id(text[i : i + CHARS_PER_TOKEN]) for i in range(0, len(text), CHARS_PER_TOKEN)]
    pad = -len(raw) % CHARS_PER_TOKEN
    ids = array("I")
    ids.frombytes(raw + b"\0" * pad)  # 4 ASCII bytes per token, read in one C pass
    if sys.byteorder != "little":
        ids.byteswap()
    return ids.tolist()


def _chunk_id(chunk: str) -> int:
    b = chunk.encode("utf-8")
    v = int.from_bytes(b, "little")
    while v > 0xFFFFFFFF:
        v = (v & 0xFFFFFFFF) ^ (v >> 32)
    return v


class BlockHasher:
    """Chained block hashes of token sequences, as (64-bit external ids, full digests).

    `max_memo` bounds the memo of (parent digest, block tokens, lora) → digest, LRU.
    """

    def __init__(self, block_size: int = 16, seed: str = "0", max_memo: int = 100_000) -> None:
        if block_size < 1:
            raise ValueError("block_size must be >= 1")
        self.block_size = block_size
        self.seed = seed
        self.root = none_hash(seed)
        self.max_memo = max_memo
        self._memo: OrderedDict[tuple[bytes, tuple[int, ...], str | None], bytes] = OrderedDict()

    def digests(
        self, tokens: Sequence[int], lora: str | None = None, max_blocks: int | None = None
    ) -> list[bytes]:
        """Digests of the full blocks of `tokens` (a partial last block is never cached)."""
        bs = self.block_size
        n = len(tokens) // bs
        if max_blocks is not None:
            n = min(n, max_blocks)
        out: list[bytes] = []
        parent = self.root
        memo = self._memo
        for i in range(n):
            block = tuple(tokens[i * bs : (i + 1) * bs])
            key = (parent, block, lora)
            d = memo.get(key)
            if d is None:
                d = block_digest(parent, block, lora)
                memo[key] = d
                if len(memo) > self.max_memo:
                    memo.popitem(last=False)
            else:
                memo.move_to_end(key)
            out.append(d)
            parent = d
        return out

    def hashes(
        self, tokens: Sequence[int], lora: str | None = None, max_blocks: int | None = None
    ) -> list[int]:
        """The 64-bit ids KV events use for the full blocks of `tokens`."""
        return [external(d) for d in self.digests(tokens, lora, max_blocks)]
