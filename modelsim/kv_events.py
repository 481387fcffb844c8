"""The simulator's KV-event publisher: vLLM's `--kv-events-config` ZMQ PUB socket and replay ROUTER.

Same wire format as vLLM (`common.kv_events`): one `(topic, seq, payload)` message per engine step
that stored or removed blocks, and a replay socket that re-sends buffered batches from a requested
sequence number. It runs on the pod's event loop: PUB sends never block (ZMQ drops past the
high-water mark, as vLLM's does), and the replay socket is served by one asyncio task.

Config is vLLM's JSON (`{"enable_kv_cache_events": true, "publisher": "zmq", "endpoint":
"tcp://*:5557", "replay_endpoint": "tcp://*:5558", "topic": "kv", "buffer_steps": 10000,
"hwm": 100000}`). `*` binds the simulator's host (127.0.0.1 by default), never all interfaces; port 0
binds an ephemeral port. Pod i of a fleet adds i to both ports, like vLLM's data-parallel ranks.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import time
from collections import deque
from dataclasses import dataclass, replace
from typing import Any

import zmq
import zmq.asyncio

from common.kv_events import END_SEQ, KVEventBatch, encode_batch, seq_bytes, seq_of

log = logging.getLogger("modelsim.kv_events")


@dataclass(frozen=True, slots=True)
class KVEventsConfig:
    endpoint: str = "tcp://*:5557"
    replay_endpoint: str | None = None
    topic: str = ""
    buffer_steps: int = 10_000
    hwm: int = 100_000

    @classmethod
    def parse(cls, text: str) -> KVEventsConfig | None:
        """vLLM's `--kv-events-config` JSON; None when it leaves events off. ValueError names the field."""
        try:
            raw = json.loads(text)
        except json.JSONDecodeError as e:
            raise ValueError(f"--kv-events-config: not JSON: {e}") from None
        if not isinstance(raw, dict):
            raise ValueError("--kv-events-config: expected a JSON object")
        known = {"enable_kv_cache_events", "publisher", "endpoint", "replay_endpoint", "topic"}
        known |= {"buffer_steps", "hwm", "max_queue_size"}
        unknown = sorted(set(raw) - known)
        if unknown:
            raise ValueError(f"--kv-events-config: unknown field(s) {unknown}")
        publisher = raw.get("publisher") or ("zmq" if raw.get("enable_kv_cache_events") else "null")
        if publisher not in ("zmq", "null"):
            raise ValueError(f"--kv-events-config: publisher must be zmq or null (got {publisher!r})")
        for key in ("endpoint", "replay_endpoint", "topic"):
            if key in raw and raw[key] is not None and not isinstance(raw[key], str):
                raise ValueError(f"--kv-events-config: {key} must be a string")
        for key in ("buffer_steps", "hwm", "max_queue_size"):
            if key in raw and (not isinstance(raw[key], int) or raw[key] < 1):
                raise ValueError(f"--kv-events-config: {key} must be an integer >= 1")
        if publisher == "null" or raw.get("enable_kv_cache_events") is False:
            return None
        cfg = cls()
        fields = {
            k: raw[k] for k in ("endpoint", "replay_endpoint", "topic", "buffer_steps", "hwm") if k in raw
        }
        cfg = replace(cfg, **fields)
        for ep in (cfg.endpoint, cfg.replay_endpoint):
            if ep is not None and not ep.startswith("tcp://"):
                raise ValueError(f"--kv-events-config: endpoint {ep!r} must be tcp://host:port")
        return cfg

    def for_pod(self, index: int, host: str) -> KVEventsConfig:
        """Pod `index`'s endpoints: `*` → `host`, ports + index (0 stays ephemeral)."""
        return replace(
            self,
            endpoint=_pod_endpoint(self.endpoint, index, host),
            replay_endpoint=_pod_endpoint(self.replay_endpoint, index, host)
            if self.replay_endpoint
            else None,
        )


def _pod_endpoint(ep: str, index: int, host: str) -> str:
    addr, _, port = ep[len("tcp://") :].rpartition(":")
    if addr in ("*", "0.0.0.0", "", "[::]", "::"):
        addr = host
    if port in ("*", "0"):
        return f"tcp://{addr}:*"
    return f"tcp://{addr}:{int(port) + index}"


class KVEventPublisher:
    """PUB + optional replay ROUTER, bound at construction (so the endpoints are known at once)."""

    def __init__(self, cfg: KVEventsConfig) -> None:
        self.cfg = cfg
        self._ctx = zmq.Context()
        self._pub = self._ctx.socket(zmq.PUB)
        self._pub.set_hwm(cfg.hwm)
        self._pub.setsockopt(zmq.LINGER, 0)
        self._pub.bind(cfg.endpoint)
        self.endpoint: str = self._pub.getsockopt_string(zmq.LAST_ENDPOINT)
        self._actx: zmq.asyncio.Context | None = None
        self._replay: zmq.asyncio.Socket | None = None
        self.replay_endpoint: str | None = None
        if cfg.replay_endpoint:
            self._actx = zmq.asyncio.Context()
            self._replay = self._actx.socket(zmq.ROUTER)
            self._replay.setsockopt(zmq.LINGER, 0)
            self._replay.bind(cfg.replay_endpoint)
            self.replay_endpoint = self._replay.getsockopt_string(zmq.LAST_ENDPOINT)
        self._topic = cfg.topic.encode()
        self._seq = 0
        self._buffer: deque[tuple[int, bytes]] = deque(maxlen=cfg.buffer_steps)
        self._task: asyncio.Task[None] | None = None
        self.published = 0
        self.dropped = 0
        self.drop_next_for_test = False  # tests: number and buffer the next batch, but do not send it

    @property
    def next_seq(self) -> int:
        return self._seq

    def start(self) -> None:
        if self._replay is not None and self._task is None:
            self._task = asyncio.get_running_loop().create_task(self._serve_replay(), name="sim-kv-replay")

    def publish(self, events: list[Any]) -> None:
        """One batch (one engine step's events); numbered even when ZMQ drops it, so gaps show."""
        if not events:
            return
        payload = encode_batch(KVEventBatch(ts=time.time(), events=events, data_parallel_rank=0))
        seq = self._seq
        self._seq += 1
        self._buffer.append((seq, payload))
        if self.drop_next_for_test:
            self.drop_next_for_test = False
            self.dropped += 1
            return
        try:
            self._pub.send_multipart((self._topic, seq_bytes(seq), payload), flags=zmq.NOBLOCK)
            self.published += 1
        except zmq.Again:
            self.dropped += 1

    async def _serve_replay(self) -> None:
        sock = self._replay
        assert sock is not None
        while True:
            frames = await sock.recv_multipart()
            if len(frames) != 3:
                log.warning("kv-events replay: malformed request (%d frames)", len(frames))
                continue
            client, _, start = frames
            first = seq_of(start)
            for seq, payload in list(self._buffer):
                if seq >= first:
                    await sock.send_multipart((client, b"", seq_bytes(seq), payload))
            await sock.send_multipart((client, b"", END_SEQ, b""))

    async def close(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None
        self._pub.close(linger=0)
        if self._replay is not None:
            self._replay.close(linger=0)
        self._ctx.term()
        if self._actx is not None:
            self._actx.term()
