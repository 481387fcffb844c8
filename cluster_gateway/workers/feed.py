"""The pool feed between a gateway process and its worker processes: messages and framing.

One scrape of each pod, however many workers: the gateway process (discovery, scraper, agent)
publishes its pool over a Unix socket; each worker applies it to its replica and answers with what
only it knows — its own in-flight and dispatch counts, its admission queue, the pods its outlier
detection ejected. The gateway sums those, so each scheduler sees the whole gateway's in-flight
requests.

What a tick sends is what changed: the pods whose state differs from the last publish (all of them
after a membership change, and to a worker that just connected), encoded once and written to every
worker, with each pod's *total* in-flight count and, per worker, which of its reports that total
includes (`acked`); a worker subtracts that report's counts to get the other processes'. A quiet
tick sends nothing, and a worker with nothing new to say skips its report. Before (a whole pool per
worker per tick, with the others' counts worked out per worker), an idle gateway with 1,000 pods
spent ~7% of a core per worker publishing and each worker ~14-16% reading, so `--workers` on a big
node would have starved the one process that scrapes.

Bound on the counts: a worker sees another worker's dispatches at most ~2 ticks late (one report,
one publish: ≤ 2 x `TICK_S` = 50 ms), the same order as the burst guard's scrape interval; its own
are exact. Messages are msgpack (msgspec), length-prefixed.
"""

from __future__ import annotations

import asyncio
import struct

import msgspec

from cluster_gateway.pool import EngineType, PodMetrics

TICK_S = 0.025
_LEN = struct.Struct("!I")
MAX_MESSAGE = 64 * 1024 * 1024


class PodView(msgspec.Struct, array_like=True, omit_defaults=True):
    """One pod as the gateway process sees it (what a worker's replica copies)."""

    name: str
    address: str
    port: int
    engine: EngineType | None = None
    labels: dict[str, str] = {}
    metrics: PodMetrics | None = None
    consecutive_failures: int = 0
    stale: bool = True
    base_models: list[str] = []
    adapters: dict[str, str] = {}  # adapter → parent ("" when the pod did not say)
    catalog_exact: bool = False
    inflight: int = 0  # all processes' in-flight requests to the pod
    dispatched_since_scrape: int = 0
    ejected_until: float = 0.0  # time.monotonic(): one clock for every process on the host
    annotations: dict[str, str] = {}  # e.g. the pod's KV-events endpoint (precise_prefix)


class Snapshot(msgspec.Struct, array_like=True):
    version: int  # the gateway pool's membership version
    pods: list[PodView]  # the pods that changed since the last snapshot; every pod when `full`
    full: bool = False  # `pods` is the whole pool: pods not in it are gone
    acked: dict[int, int] = {}  # worker → `seq` of its last report counted in the pods' `inflight`
    metrics: bytes = b""  # the whole group's /metrics body, when this worker asked (metrics_feed.py)
    releases: list[tuple[str, int]] = []  # ext_authz picks of this worker that ended (extauthz/release.py)


class WorkerReport(msgspec.Struct, array_like=True, omit_defaults=True):
    worker: int
    seq: int = 0  # counts this worker's reports; the gateway acknowledges it in `Snapshot.acked`
    inflight: dict[str, int] = {}  # pod → this worker's in-flight requests
    dispatched: dict[str, int] = {}  # pod → requests sent since the previous report
    queued: dict[str, int] = {}  # requested model → requests waiting in this worker's admission
    ejected: dict[str, float] = {}  # pod → ejected until (time.monotonic())
    want_metrics: bool = False  # this worker serves a /metrics scrape: send the group's body
    metrics: list[tuple[str, list[tuple[str, str]], float]] = []  # its counters (metrics_feed.py)
    releases: list[tuple[str, int]] = []  # other processes' ext_authz picks that ended, seen here


_snapshot_decoder = msgspec.msgpack.Decoder(Snapshot)
_report_decoder = msgspec.msgpack.Decoder(WorkerReport)
_encoder = msgspec.msgpack.Encoder()


def frame(msg: Snapshot | WorkerReport) -> bytes:
    body = _encoder.encode(msg)
    return _LEN.pack(len(body)) + body


async def _read_frame(reader: asyncio.StreamReader) -> bytes:
    (n,) = _LEN.unpack(await reader.readexactly(_LEN.size))
    if n > MAX_MESSAGE:
        raise ValueError(f"feed message of {n} bytes")
    return await reader.readexactly(n)


async def read_snapshot(reader: asyncio.StreamReader) -> Snapshot:
    return _snapshot_decoder.decode(await _read_frame(reader))


async def read_report(reader: asyncio.StreamReader) -> WorkerReport:
    return _report_decoder.decode(await _read_frame(reader))
