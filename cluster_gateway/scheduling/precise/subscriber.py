"""One pod's KV-event stream: a ZMQ SUB on the engine's PUB endpoint, and replay from its ROUTER.

On start it asks the replay socket for everything from seq 0, so a gateway that joins a running
engine still learns what was cached before it came (complete when the engine's buffer reaches back
to seq 0). A live batch whose number skips ahead is a gap: the missing batches are replayed before
it is applied; if they cannot be (no replay socket, timeout, buffer overrun), the pod's view is marked
gapped (`index.PodCache`). The replay socket is a DEALER, which, unlike REQ, can take the many
replies vLLM's ROUTER sends for one request.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging

import zmq
import zmq.asyncio

from cluster_gateway.scheduling.precise.index import PodCache
from common.kv_events import DecodeError, decode_batch, seq_bytes, seq_of

log = logging.getLogger("fleetgate.kv_events")


def _socket(ctx: zmq.asyncio.Context, kind: int, endpoint: str) -> zmq.asyncio.Socket:
    sock = ctx.socket(kind)
    sock.setsockopt(zmq.LINGER, 0)
    if "[" in endpoint:
        sock.setsockopt(zmq.IPV6, 1)
    sock.connect(endpoint)
    return sock


class EventStream:
    """Feeds one `PodCache` from a pod's endpoints until `close()`."""

    def __init__(
        self,
        ctx: zmq.asyncio.Context,
        cache: PodCache,
        endpoint: str,
        replay_endpoint: str | None,
        topic: str = "",
        replay_timeout_s: float = 1.0,
    ) -> None:
        self.cache = cache
        self.endpoint = endpoint
        self.replay_endpoint = replay_endpoint
        self.replay_timeout_s = replay_timeout_s
        self._sub = _socket(ctx, zmq.SUB, endpoint)
        self._sub.setsockopt(zmq.SUBSCRIBE, topic.encode())
        self._ctx = ctx
        self._task: asyncio.Task[None] | None = None
        self._last_live: int | None = None
        self.decode_errors = 0

    def start(self) -> None:
        if self._task is None:
            self._task = asyncio.get_running_loop().create_task(
                self._run(), name=f"kv-events {self.endpoint}"
            )

    async def close(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None
        self._sub.close(linger=0)

    async def _run(self) -> None:
        try:
            await self._replay(0, None)  # learn what the engine cached before we came
            while True:
                frames = await self._sub.recv_multipart()
                if len(frames) != 3:
                    self.decode_errors += 1
                    continue
                await self._live(seq_of(frames[1]), frames[2])
        except asyncio.CancelledError:
            raise
        except Exception:  # a bug here must not take the gateway down; the pod falls back
            log.exception("kv events of %s: subscriber stopped", self.cache.pod)
            self.cache.lost(self.cache.next_seq or 0)

    async def _live(self, seq: int, payload: bytes) -> None:
        cache = self.cache
        last, self._last_live = self._last_live, seq
        if last is not None and seq <= last:  # live numbers only grow: the publisher started over
            cache.restart()
            if seq != 0:
                await self._replay(0, seq)
        elif cache.next_seq is not None and seq > cache.next_seq:
            await self._replay(cache.next_seq, seq)  # a gap: fetch the missing batches first
        nxt = cache.next_seq
        if nxt is not None and seq < nxt:
            return  # the replay already applied it
        if nxt is not None and seq > nxt:
            cache.lost(seq)  # the replay could not fill the gap
        self._apply(seq, payload)

    def _apply(self, seq: int, payload: bytes) -> None:
        try:
            _ts, events = decode_batch(payload)
        except DecodeError as e:
            self.decode_errors += 1
            log.warning("kv events of %s: batch %d undecodable (%s)", self.cache.pod, seq, e)
            self.cache.lost(seq + 1)
            return
        self.cache.apply(seq, events)

    async def _replay(self, start: int, before: int | None) -> None:
        """Apply buffered batches from `start` (up to `before`, exclusive) in order, as far as they
        connect to what the cache has; a no-op without a replay endpoint."""
        if self.replay_endpoint is None:
            return
        sock = _socket(self._ctx, zmq.DEALER, self.replay_endpoint)
        try:
            await sock.send_multipart((b"", seq_bytes(start)))
            while True:
                if not await sock.poll(int(self.replay_timeout_s * 1000)):
                    log.info("kv events of %s: replay timed out", self.cache.pod)
                    return
                frames = await sock.recv_multipart()
                if len(frames) != 3:
                    continue
                seq = seq_of(frames[1])
                if seq < 0:
                    return  # end of replay
                if before is not None and seq >= before:
                    continue
                nxt = self.cache.next_seq
                if nxt is None:
                    if seq != start:
                        continue  # bootstrap: only a replay that starts where we asked is complete
                elif seq != nxt:
                    continue  # already applied, or a hole in the buffer (left to the caller)
                self._apply(seq, frames[2])
        finally:
            sock.close(linger=0)
