"""One keep-alive HTTP/1.1 connection to an upstream, as an asyncio Protocol parsed by httptools.

Why not httpx: a profile of the gateway at concurrency 64 spent 62% of its CPU in httpcore's pool
bookkeeping (every request start/end rescans every pooled connection) and most of the rest in anyio
and h11; Fleetgate's own work was 2%. This connection costs one `transport.write` per request and
one httptools callback per header and body chunk; the pool (`pool.py`) takes and returns it in O(1).

A connection carries one request at a time. Response bytes are queued as they arrive and handed out
by `Response.next_chunk()` — all pending bytes at once, so a slow consumer makes fewer, larger sends.
Reading pauses when too much is queued (back-pressure to the pod instead of unbounded memory).
`Response.relay()` streams a body on: each chunk goes to the client from the socket callback that
parsed it while the client keeps up, and through the queue above when it does not.
Every wait has a deadline set with `loop.call_later` (cheaper than `asyncio.wait_for`).

Interim (1xx) responses are an acknowledgement, not the answer: `acked` turns True and the parser
waits on for the final response. A request sent with `expect: 100-continue` (the router's ack
deadline, `HostPool.request(ack_timeout_s=...)`) learns within a round trip that the server has it,
long before a slow answer's head arrives.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
import time
from collections import deque
from typing import TYPE_CHECKING, Protocol, cast

import httptools

from common.upstream.errors import UpstreamClosed, UpstreamError, UpstreamProtocolError, UpstreamTimeout

if TYPE_CHECKING:
    from common.upstream.pool import HostPool

Headers = list[tuple[bytes, bytes]]

_HIGH_WATER = 256 * 1024  # queued response bytes before reading pauses
_LOW_WATER = 64 * 1024
# read_ack: a timer this late (s) says the loop lagged, not the path; the extra time given back to
# such lag is at most this multiple of the ack deadline
ACK_LAG_TOLERANCE_S = 0.05
ACK_LAG_ALLOWANCE = 3.0
# read_ack: when the deadline passes while the same host is sending bytes on its other connections,
# it is busy, not black-holed; the deadline is renewed, up to this multiple of it in all
ACK_BUSY_ALLOWANCE = 3.0


def _joined(parts: list[bytes] | deque[bytes]) -> bytes:
    """The parts as one bytes object (without a copy for one part), emptying the container."""
    data = parts[0] if len(parts) == 1 else b"".join(parts)
    parts.clear()
    return data


class BodySink(Protocol):
    """Where `Response.relay()` sends body bytes (the client's side of a proxied stream)."""

    def push(self, data: bytes) -> bool:
        """Write `data` now if the client takes it without waiting; False: nothing was written."""
        ...

    async def put(self, data: bytes) -> None:
        """Write `data`, waiting as long as the client needs to take it."""
        ...


async def write_to(sink: BodySink, data: bytes) -> None:
    """`data` to `sink`: at once if the client takes it, else waiting for it."""
    if not sink.push(data):
        await sink.put(data)


class Connection(asyncio.Protocol):
    """The protocol object of one TCP connection; `Response` is its consumer-facing half."""

    def __init__(self, pool: HostPool) -> None:
        self.pool = pool
        self.loop = asyncio.get_running_loop()
        self.transport: asyncio.Transport | None = None
        self.closed = False
        self.idle_since = 0.0
        self.requests = 0  # requests sent on this connection (>0: reused)
        self.slot_freed = False  # the pool no longer counts this connection
        # the deadline of the wait in progress and the one lazy timer that enforces it (`_wait`)
        self._deadline: float | None = None
        self._phase = ""
        self._timer: asyncio.TimerHandle | None = None
        self._reset()

    def _reset(self) -> None:
        self._parser = httptools.HttpResponseParser(self)
        self.status = 0
        self.headers: Headers = []
        self.head_done = False
        self.complete = False
        self.keep_alive = True
        self.got_bytes = False  # any byte of this response arrived
        self.acked = False  # an interim 1xx (e.g. 100 Continue) or the final head arrived
        self._interim = False  # parsing a 1xx: its end is not the response's
        self.error: Exception | None = None
        self._chunks: deque[bytes] = deque()
        self._queued = 0
        self._paused = False
        self._waiter: asyncio.Future[None] | None = None
        self.sink: BodySink | None = None  # relay(): body chunks go here from data_received
        self._unsent: list[bytes] = []  # body chunks of the read being parsed, for the sink
        self._sink_idle: float | None = None

    # --- asyncio.Protocol --------------------------------------------------
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)  # uvloop's is not a subclass
        sock = transport.get_extra_info("socket")
        if sock is not None:
            with contextlib.suppress(OSError):
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def data_received(self, data: bytes) -> None:
        self.got_bytes = True
        self.pool.heard += 1
        try:
            self._parser.feed_data(data)
        except httptools.HttpParserError as exc:
            self._fail(UpstreamProtocolError(f"invalid HTTP response: {exc}"))
            self.abort()
        finally:
            if self._unsent:
                self._push_unsent()

    def eof_received(self) -> bool:
        return False  # close our side too

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        self._disarm()
        if not self.complete:
            if self.head_done and exc is None and self._unframed():
                self.complete = True  # a body without framing ends with the connection
                self.keep_alive = False
                self._wake()
            else:
                self._fail(UpstreamClosed(self.got_bytes, f"connection closed ({exc or 'eof'})"))
        self.pool.forget(self)

    def _unframed(self) -> bool:
        for k, v in self.headers:
            if k == b"content-length" or (k == b"transfer-encoding" and b"chunked" in v.lower()):
                return False
        return True

    # --- httptools callbacks -------------------------------------------------
    def on_header(self, name: bytes, value: bytes) -> None:
        self.headers.append((name.lower(), value))

    def on_headers_complete(self) -> None:
        status = self._parser.get_status_code()
        self.acked = True
        if 100 <= status < 200 and status != 101:  # interim: the final response follows
            self._interim = True
            self.headers = []
            self._wake()
            return
        self.status = status
        self.keep_alive = bool(self._parser.should_keep_alive())
        self.head_done = True
        self._wake()

    def on_body(self, body: bytes) -> None:
        if self.sink is not None and not self._chunks:
            self._unsent.append(body)  # pushed as one write once this read is parsed
            return
        self._queue(body)

    def _push_unsent(self) -> None:
        """The body bytes of one read, in one write: a read under load holds several chunks, and a
        write each would cost a send call each (`next_chunk` joins them the same way)."""
        data = _joined(self._unsent)
        sink = self.sink
        if sink is not None:
            try:
                pushed = sink.push(data)
            except Exception:  # the sink's fault, not the upstream's: `put` meets it in the relay
                pushed = False
            if pushed:
                if self._sink_idle is not None:  # the idle deadline counts from the latest chunk
                    self._deadline = self.loop.time() + self._sink_idle
                return
            self.sink = None  # queue from here on, in order, and wake the relay to `put`
        self._queue(data)

    def _queue(self, body: bytes) -> None:
        self._chunks.append(body)
        self._queued += len(body)
        if self._queued > _HIGH_WATER and not self._paused and self.transport is not None:
            self._paused = True
            self.transport.pause_reading()
        self._wake()

    def on_message_complete(self) -> None:
        if self._interim:
            self._interim = False
            return
        self.complete = True
        self._wake()

    # --- internals -------------------------------------------------------------
    def _wake(self) -> None:
        w = self._waiter
        if w is not None and not w.done():
            w.set_result(None)

    def _fail(self, exc: Exception) -> None:
        if self.error is None:
            self.error = exc
        w = self._waiter
        if w is not None and not w.done():
            w.set_exception(exc)

    async def _wait(self, wait_s: float | None, phase: str) -> None:
        """Wait for `_wake`/`_fail`, at most `wait_s` (UpstreamTimeout(phase) after it).

        A stream waits once per chunk, and a timer armed and cancelled per wait was ~5% of the
        router's CPU with 1,000 streams. The deadline is a field instead: one timer per connection
        stays armed, and when it fires before the current deadline (the wait it was armed for
        ended, a later one began) it re-arms for that deadline. A deadline earlier than the armed
        timer (a shorter wait) re-arms at once."""
        loop = self.loop
        fut = loop.create_future()
        self._waiter = fut
        if wait_s is None:
            self._deadline = None
        else:
            deadline = self._deadline = loop.time() + wait_s
            self._phase = phase
            timer = self._timer
            if timer is None or timer.when() > deadline:
                if timer is not None:
                    timer.cancel()
                self._timer = loop.call_at(deadline, self._on_timer)
        try:
            await fut
        finally:
            self._waiter = None

    def _on_timer(self) -> None:
        self._timer = None
        fut, deadline = self._waiter, self._deadline
        if fut is None or fut.done() or deadline is None:
            return  # no bounded wait in progress: the next one arms a timer again
        if self.loop.time() >= deadline:
            fut.set_exception(UpstreamTimeout(self._phase))
        else:
            self._timer = self.loop.call_at(deadline, self._on_timer)

    def _disarm(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    # --- used by HostPool / Response -----------------------------------------
    def send(self, head: bytes, body: bytes) -> None:
        assert self.transport is not None
        self._reset()
        self.requests += 1
        if body:
            self.transport.writelines((head, body))
        else:
            self.transport.write(head)

    async def read_ack(self, wait_s: float) -> None:
        """Wait until the server acknowledged the request: an interim 1xx or the final head.

        Time this loop spent too busy to look does not count: when the deadline's timer fires late
        (the event loop lagged, and the ack may sit unread in the socket) the deadline moves by the
        lateness, up to `ACK_LAG_ALLOWANCE` x `wait_s` in all. Without it a router loaded enough to
        lag seconds took every gateway for black-holed at once and ejected them (a burst of 400
        streams through one replica on a loaded 2-core machine did).

        Nor does a server that is answering: when the deadline passes while the same host sent
        bytes on any of its connections, the deadline is renewed (up to `ACK_BUSY_ALLOWANCE` x
        `wait_s` in all). A gateway reading 2,000 new streams at once on one process acknowledged
        some after the router's 3 s and they failed with 503, though it was serving; a black-holed
        host sends nothing and still fails at `wait_s`."""
        loop = self.loop
        deadline = loop.time() + wait_s
        allowance = ACK_LAG_ALLOWANCE * wait_s
        busy_allowance = ACK_BUSY_ALLOWANCE * wait_s
        heard = self.pool.heard
        while not self.acked:
            if self.error is not None:
                raise self.error
            due = max(0.0, deadline - loop.time())
            armed = loop.time()
            try:
                await self._wait(due, "ack")
            except UpstreamTimeout:
                if self.acked:
                    return
                late = loop.time() - (armed + due)
                if late > ACK_LAG_TOLERANCE_S and allowance > 0:
                    deadline = loop.time() + min(late, allowance)
                    allowance -= late
                elif self.pool.heard != heard and busy_allowance > 0:
                    heard = self.pool.heard
                    deadline = loop.time() + min(wait_s, busy_allowance)
                    busy_allowance -= wait_s
                else:
                    raise

    async def read_head(self, wait_s: float | None) -> None:
        while not self.head_done:
            if self.error is not None:
                raise self.error
            await self._wait(wait_s, "first_byte")

    async def next_chunk(self, wait_s: float | None) -> bytes:
        """All response-body bytes queued so far (waiting up to `wait_s` for some); b"" at the end."""
        while not self._chunks:
            if self.complete:
                return b""
            if self.error is not None:
                raise self.error
            await self._wait(wait_s, "idle")
        return self._take()

    def _take(self) -> bytes:
        """Every queued body byte (b"" when none), resuming a paused read."""
        if not self._chunks:
            return b""
        data = _joined(self._chunks)
        self._queued = 0
        if self._paused and self.transport is not None:
            self._paused = False
            self.transport.resume_reading()
        return data

    async def relay(self, sink: BodySink, idle_s: float | None) -> None:
        """Send the rest of the body to `sink`; returns at its end, raises the upstream's error.

        While the client keeps up, `data_received` hands the body bytes of each read to
        `sink.push` in one write: no future, no task wake-up and no ASGI message per chunk (with
        2,000 streams those were about half of a proxy's Python time per chunk). A chunk the sink
        refuses (the client's buffer is full, or the sink has no direct path) is queued, and this
        coroutine wakes to `await sink.put` it, then pushes again. `idle_s` bounds the time
        between chunks, as `next_chunk` does."""
        try:
            while True:
                data = self._take()
                if data:
                    await sink.put(data)
                    continue  # more may have queued while the client drained
                if self.complete:
                    return
                if self.error is not None:
                    raise self.error
                self.sink, self._sink_idle = sink, idle_s
                try:
                    await self._wait(idle_s, "idle")  # until the end, an error or a refused chunk
                except UpstreamError:
                    self.sink = None
                    if data := self._take():  # bytes queued before the error still go out first
                        await sink.put(data)
                    raise
                finally:
                    self.sink = None
        finally:
            self._sink_idle = None

    @property
    def reusable(self) -> bool:
        return self.complete and self.keep_alive and self.error is None and not self.closed

    def abort(self) -> None:
        if self.transport is not None and not self.closed:
            self.transport.abort()

    def mark_idle(self) -> None:
        self.idle_since = time.monotonic()


class Response:
    """An upstream response: status and headers known, body read with `next_chunk()` / `read()`.

    Always end it with `release()` (keeps the connection for reuse when the body was read to the
    end) — in a `finally`, since a cancelled read leaves the connection mid-response and it must close.
    """

    __slots__ = ("_conn", "_done", "headers", "status")

    def __init__(self, conn: Connection) -> None:
        self._conn = conn
        self.status = conn.status
        self.headers = conn.headers
        self._done = False

    def header(self, name: bytes) -> bytes | None:
        for k, v in self.headers:
            if k == name:
                return v
        return None

    async def next_chunk(self, wait_s: float | None = None) -> bytes:
        return await self._conn.next_chunk(wait_s)

    async def relay(self, sink: BodySink, idle_s: float | None = None) -> None:
        """The rest of the body to `sink` (see `Connection.relay`); `idle_s` between chunks."""
        await self._conn.relay(sink, idle_s)

    async def read(self, wait_s: float | None = None, max_bytes: int = 64 * 1024 * 1024) -> bytes:
        """The rest of the body; `wait_s` applies to each wait for more bytes."""
        parts: list[bytes] = []
        size = 0
        while chunk := await self._conn.next_chunk(wait_s):
            size += len(chunk)
            if size > max_bytes:
                raise UpstreamProtocolError(f"response body exceeds {max_bytes} bytes")
            parts.append(chunk)
        return b"".join(parts)

    @property
    def complete(self) -> bool:
        return self._conn.complete

    def release(self) -> None:
        if self._done:
            return
        self._done = True
        self._conn.pool.give_back(self._conn)
