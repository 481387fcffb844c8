"""The KV-event wire format and block hashes are vLLM's: what its own subscriber types decode, and
sha256_cbor chains recomputed from first principles."""

from __future__ import annotations

import hashlib

import cbor2
import msgspec
import pytest

from common.kv_block_hash import BlockHasher, external, none_hash, sim_token_ids
from common.kv_events import (
    AllBlocksCleared,
    BlockRemoved,
    BlockStored,
    Cleared,
    DecodeError,
    KVEventBatch,
    Removed,
    Stored,
    decode_batch,
    encode_batch,
)


# The layout of vLLM's examples/online_serving/kv_events_subscriber.py, written out independently.
class _VEvent(msgspec.Struct, array_like=True, omit_defaults=True, gc=False, tag=True):
    pass


class _VStored(_VEvent, tag="BlockStored"):
    block_hashes: list[int]
    parent_block_hash: int | None
    token_ids: list[int]
    block_size: int
    lora_id: int | None
    medium: str | None


class _VRemoved(_VEvent, tag="BlockRemoved"):
    block_hashes: list[int]
    medium: str | None


class _VCleared(_VEvent, tag="AllBlocksCleared"):
    pass


class _VBatch(msgspec.Struct, array_like=True, omit_defaults=True, gc=False):
    ts: float
    events: list[_VStored | _VRemoved | _VCleared]


def _batch() -> KVEventBatch:
    return KVEventBatch(
        ts=12.5,
        events=[
            BlockStored([11, 12], None, list(range(32)), 16, None, "GPU"),
            BlockRemoved([7], "GPU"),
            AllBlocksCleared(),
        ],
        data_parallel_rank=0,
    )


def test_batches_decode_with_vllms_own_subscriber_types() -> None:
    got = msgspec.msgpack.Decoder(_VBatch).decode(encode_batch(_batch()))
    assert got.ts == 12.5
    stored, removed, cleared = got.events
    assert isinstance(stored, _VStored) and stored.block_hashes == [11, 12] and stored.block_size == 16
    assert stored.token_ids == list(range(32)) and stored.parent_block_hash is None
    assert isinstance(removed, _VRemoved) and removed.block_hashes == [7]
    assert isinstance(cleared, _VCleared)


def test_lenient_decoder_reads_array_and_map_encodings_and_digest_hashes() -> None:
    ts, events = decode_batch(encode_batch(_batch()))
    assert ts == 12.5
    assert events == [Stored([11, 12], None, list(range(32)), 16, None), Removed([7]), Cleared()]
    digest = bytes(range(32))
    as_map = {
        "ts": 1.0,
        "events": [
            {
                "type": "BlockStored",
                "block_hashes": [digest],
                "parent_block_hash": None,
                "token_ids": [1] * 16,
                "block_size": 16,
                "lora_id": None,
                "medium": "GPU",
                "lora_name": "sql",
            },
            {"type": "FutureEvent", "x": 1},
        ],
    }
    _ts, events = decode_batch(msgspec.msgpack.encode(as_map))
    assert events == [Stored([int.from_bytes(digest, "big") & (2**64 - 1)], None, [1] * 16, 16, "sql")]
    with pytest.raises(DecodeError):
        decode_batch(b"\x01")
    with pytest.raises(DecodeError):
        decode_batch(msgspec.msgpack.encode([1.0, [["BlockStored", ["x"], None, [], 16]]]))


def test_block_hashes_are_vllms_sha256_cbor_chain() -> None:
    tokens = sim_token_ids("abcd" * 40)  # 40 tokens: 2 full blocks of 16, a partial one never hashed
    assert tokens[0] == int.from_bytes(b"abcd", "little")
    root = hashlib.sha256(cbor2.dumps("0", canonical=True)).digest()
    assert none_hash("0") == root
    d1 = hashlib.sha256(cbor2.dumps((root, tuple(tokens[:16]), None), canonical=True)).digest()
    d2 = hashlib.sha256(cbor2.dumps((d1, tuple(tokens[16:32]), None), canonical=True)).digest()
    h = BlockHasher(16, "0")
    assert h.hashes(tokens) == [external(d1), external(d2)]
    assert h.hashes(tokens) == [external(d1), external(d2)]  # memoised, same answer
    lora = hashlib.sha256(cbor2.dumps((root, tuple(tokens[:16]), ("sql",)), canonical=True)).digest()
    assert h.hashes(tokens, "sql", 1) == [external(lora)]
    assert BlockHasher(16, "1").hashes(tokens) != h.hashes(tokens)  # the seed matters


def test_sim_token_ids_handle_non_ascii_text() -> None:
    ids = sim_token_ids("héllo wörld, ça va?")
    assert len(ids) == 5 and all(0 <= i < 2**32 for i in ids)
    assert sim_token_ids("héllo wörld, ça va?") == ids
