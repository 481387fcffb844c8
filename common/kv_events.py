"""vLLM's KV-cache event wire format (`vllm/distributed/kv_events.py`), for the simulator and the gateway.

An engine started with `--kv-events-config` publishes on a ZMQ PUB socket one multipart message
per engine step: `(topic, seq, payload)`, `seq` an 8-byte big-endian counter from 0 and `payload`
a msgpack `KVEventBatch`. Structs are msgspec `array_like` and events `tag`ged, so a batch is
`[ts, [event, ...], data_parallel_rank]` and an event `["BlockStored", block_hashes,
parent_block_hash, token_ids, block_size, lora_id, medium, lora_name]`,
`["BlockRemoved", block_hashes, medium]` or `["AllBlocksCleared"]` (trailing defaults omitted).
A ROUTER replay socket answers `(b"", start_seq)` with `(b"", seq, payload)` for every buffered
batch from `start_seq` on, then `(b"", -1, b"")`.

Decoding is deliberately lenient: it also takes the map encoding (some vLLM versions drop
`array_like`; the tag is then the `type` key), block hashes as 32-byte digests instead of 64-bit
ints, and ignores fields it does not know, so one subscriber serves several engine versions.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import msgspec

MEDIUM_GPU = "GPU"
END_SEQ = (-1).to_bytes(8, "big", signed=True)
U64 = (1 << 64) - 1


class _Event(msgspec.Struct, array_like=True, omit_defaults=True, gc=False, tag=True):
    pass


class BlockStored(_Event):
    block_hashes: list[int]
    parent_block_hash: int | None
    token_ids: list[int]
    block_size: int
    lora_id: int | None
    medium: str | None
    lora_name: str | None = None


class BlockRemoved(_Event):
    block_hashes: list[int]
    medium: str | None


class AllBlocksCleared(_Event):
    pass


class KVEventBatch(msgspec.Struct, array_like=True, omit_defaults=True, gc=False):
    ts: float
    events: list[BlockStored | BlockRemoved | AllBlocksCleared]
    data_parallel_rank: int | None = None


_encoder = msgspec.msgpack.Encoder()


def encode_batch(batch: KVEventBatch) -> bytes:
    return _encoder.encode(batch)


def seq_bytes(seq: int) -> bytes:
    return seq.to_bytes(8, "big", signed=True)


def seq_of(raw: bytes) -> int:
    return int.from_bytes(raw, "big", signed=True)


# -- decoding (lenient) -----------------------------------------------------------------------


@dataclass(slots=True)
class Stored:
    hashes: list[int]
    parent: int | None
    token_ids: list[int]
    block_size: int
    lora_name: str | None


@dataclass(slots=True)
class Removed:
    hashes: list[int]


@dataclass(slots=True)
class Cleared:
    pass


Event = Stored | Removed | Cleared


class DecodeError(ValueError):
    """A payload that is not a KV event batch."""


def as_block_id(h: object) -> int:
    """A block hash as the 64-bit id (ints as sent; digests by their low 64 bits, big-endian)."""
    if isinstance(h, bool):
        raise DecodeError(f"block hash {h!r} is not an int or bytes")
    if isinstance(h, int):
        return h & U64
    if isinstance(h, bytes | bytearray):
        return int.from_bytes(h, "big") & U64
    raise DecodeError(f"block hash {h!r} is not an int or bytes")


def _opt_id(h: object) -> int | None:
    return None if h is None else as_block_id(h)


_NAMES = {
    "BlockStored": (
        "block_hashes",
        "parent_block_hash",
        "token_ids",
        "block_size",
        "lora_id",
        "medium",
        "lora_name",
    ),
    "BlockRemoved": ("block_hashes", "medium"),
    "AllBlocksCleared": (),
}


def _fields(raw: Any) -> tuple[str, list[Any]]:
    """(tag, positional fields) of an array- or map-encoded tagged struct."""
    if isinstance(raw, list | tuple) and raw and isinstance(raw[0], str):
        return raw[0], list(raw[1:])
    if isinstance(raw, dict) and isinstance(raw.get("type"), str):
        tag = raw["type"]
        return tag, [raw.get(n) for n in _NAMES.get(tag, ())]
    raise DecodeError(f"not a tagged KV event: {raw!r:.80}")


def _event(raw: Any) -> Event | None:
    tag, f = _fields(raw)
    if tag == "BlockStored":
        if len(f) < 4:
            raise DecodeError("BlockStored has fewer than 4 fields")
        lora_name = f[6] if len(f) > 6 and isinstance(f[6], str) else None
        return Stored(
            hashes=[as_block_id(h) for h in f[0] or ()],
            parent=_opt_id(f[1]),
            token_ids=[int(t) for t in f[2] or ()],
            block_size=int(f[3]),
            lora_name=lora_name,
        )
    if tag == "BlockRemoved":
        return Removed([as_block_id(h) for h in (f[0] if f else None) or ()])
    if tag == "AllBlocksCleared":
        return Cleared()
    return None  # an event type this version does not know: skipped


def decode_batch(payload: bytes) -> tuple[float, list[Event]]:
    """(ts, events) of one payload; DecodeError when it is not a KV event batch."""
    try:
        raw = msgspec.msgpack.decode(payload)
    except msgspec.DecodeError as e:
        raise DecodeError(str(e)) from None
    if isinstance(raw, dict):
        ts, events = raw.get("ts"), raw.get("events")
    elif isinstance(raw, list) and len(raw) >= 2:
        ts, events = raw[0], raw[1]
    else:
        raise DecodeError("not a KV event batch")
    if not isinstance(events, list) or not isinstance(ts, int | float):
        raise DecodeError("not a KV event batch")
    out: list[Event] = []
    for raw_event in events:
        try:
            ev = _event(raw_event)
        except (TypeError, ValueError) as exc:  # a field of the wrong shape
            raise DecodeError(f"bad KV event: {exc}") from None
        if ev is not None:
            out.append(ev)
    return float(ts), out
