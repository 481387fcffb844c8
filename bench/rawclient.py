"""A bounded HTTP/1.1 load client on raw asyncio sockets + httptools, for the throughput bench.

Why not httpx: at 2,000 concurrent streams httpx's own pool bookkeeping becomes the bottleneck and
the client, not the router under test, times out. This client does one request per connection at a
time (a keep-alive pool only for the fixed-rate latency probe), parses with httptools, counts SSE
events without copying bodies, and bounds every exchange by a deadline, so a stalled router turns
into counted timeouts, never into a hung bench. It shares no code with the data path it measures.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import socket
import time
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, cast

import httptools

DONE = b"[DONE]"


def build_request(
    host: str, port: int, path: str, body: Mapping[str, Any], headers: Mapping[str, str] | None = None
) -> bytes:
    """A complete POST with a JSON body, as bytes written once per exchange."""
    payload = json.dumps(body, separators=(",", ":")).encode()
    head = [f"POST {path} HTTP/1.1", f"host: {host}:{port}", "content-type: application/json"]
    head += [f"{k}: {v}" for k, v in (headers or {}).items()]
    head.append(f"content-length: {len(payload)}")
    return ("\r\n".join(head) + "\r\n\r\n").encode() + payload


@dataclass(slots=True)
class Outcome:
    """One exchange: `error` is empty when the response completed with status 200."""

    status: int = 0
    ttfb_s: float | None = None  # first body byte after the request was written
    total_s: float | None = None
    events: int = 0  # SSE `data:` lines seen
    done: bool = False  # the stream ended with `data: [DONE]`
    error: str = ""
    body_head: bytes = b""  # the start of a non-200 answer's body: what the router said was wrong


class _Exchange(asyncio.Protocol):
    """A connection that carries one request at a time; `send` resolves when the response is whole."""

    def __init__(self) -> None:
        self.parser = httptools.HttpResponseParser(self)
        self.transport: asyncio.Transport | None = None
        self.waiter: asyncio.Future[None] | None = None
        self.closed = False
        self.keep_alive = False
        self._new()

    def _new(self) -> None:
        self.out = Outcome()
        self.t0 = 0.0
        self._tail = b""  # last 4 bytes: a `data:` split across two reads is still counted once
        self._last = b""  # last bytes of the body, to see the [DONE] marker

    # --- asyncio.Protocol
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)  # uvloop's is not a subclass
        sock = transport.get_extra_info("socket")
        if sock is not None:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def data_received(self, data: bytes) -> None:
        try:
            self.parser.feed_data(data)
        except httptools.HttpParserError as exc:
            self._finish(f"bad response: {exc}")
            self.close()

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        self._finish("connection closed early")

    # --- httptools callbacks
    def on_headers_complete(self) -> None:
        self.out.status = self.parser.get_status_code()
        self.keep_alive = self.parser.should_keep_alive()

    def on_body(self, body: bytes) -> None:
        if self.out.ttfb_s is None:
            self.out.ttfb_s = time.perf_counter() - self.t0
        buf = self._tail + body
        self.out.events += buf.count(b"data:")
        self._tail = buf[-4:]
        self._last = (self._last + body)[-32:]
        if self.out.status != 200 and len(self.out.body_head) < 300:
            self.out.body_head += body[: 300 - len(self.out.body_head)]

    def on_message_complete(self) -> None:
        self.out.total_s = time.perf_counter() - self.t0
        self.out.done = DONE in self._last
        self._finish("" if self.out.status == 200 else f"HTTP {self.out.status}")

    # ---
    def _finish(self, error: str) -> None:
        if self.waiter is not None and not self.waiter.done():
            self.out.error = error
            self.waiter.set_result(None)

    async def send(self, raw: bytes, timeout_s: float) -> Outcome:
        assert self.transport is not None
        self._new()
        self.waiter = asyncio.get_running_loop().create_future()
        self.t0 = time.perf_counter()
        self.transport.write(raw)
        try:
            await asyncio.wait_for(self.waiter, timeout_s)
        except TimeoutError:
            self.out.error = "timeout"
            self.close()
        return self.out

    def close(self) -> None:
        if self.transport is not None and not self.closed:
            self.transport.abort()
        self.closed = True


async def connect(host: str, port: int, timeout_s: float) -> _Exchange:
    loop = asyncio.get_running_loop()
    _, proto = await asyncio.wait_for(loop.create_connection(_Exchange, host, port), timeout_s)
    return proto


async def one_shot(host: str, port: int, raw: bytes, timeout_s: float) -> Outcome:
    """A fresh connection, one exchange, closed: every failure becomes an Outcome, none raises."""
    t0 = time.perf_counter()
    try:
        conn = await connect(host, port, timeout_s)
    except TimeoutError:
        return Outcome(error="connect timeout")
    except OSError as exc:
        return Outcome(error=f"connect error ({exc.__class__.__name__})")
    try:
        return await conn.send(raw, max(0.001, timeout_s - (time.perf_counter() - t0)))
    finally:
        conn.close()


def stream_ok(out: Outcome, events: int) -> Outcome:
    """A 200 stream still fails when it ended before `events` data events or without [DONE]."""
    if not out.error and (out.events < events or not out.done):
        out.error = "incomplete stream"
    return out


@dataclass(slots=True)
class StreamRun:
    streams: int
    wall_s: float
    ttfb_s: list[float] = field(default_factory=list)  # of the streams that completed
    errors: Counter[str] = field(default_factory=Counter)  # error kind -> count
    samples: dict[str, str] = field(default_factory=dict)  # error kind -> the first such answer's body

    @property
    def failed(self) -> int:
        return sum(self.errors.values())


async def concurrent_streams(
    host: str, port: int, raw: bytes, n: int, events: int, timeout_s: float
) -> StreamRun:
    """`n` streams opened at once, each on its own connection, each bounded by `timeout_s` overall."""

    async def one() -> Outcome:
        return stream_ok(await one_shot(host, port, raw, timeout_s), events)

    t0 = time.perf_counter()
    outs = await asyncio.gather(*(one() for _ in range(n)))
    run = StreamRun(n, time.perf_counter() - t0)
    for o in outs:
        if o.error:
            run.errors[o.error] += 1
            if o.body_head and o.error not in run.samples:
                run.samples[o.error] = o.body_head.decode(errors="replace")
        elif o.ttfb_s is not None:
            run.ttfb_s.append(o.ttfb_s)
    return run


class KeepAlivePool:
    """Idle keep-alive connections to one address, for paced requests (LIFO: the warm one first)."""

    def __init__(self, host: str, port: int) -> None:
        self.host, self.port = host, port
        self.idle: list[_Exchange] = []

    async def request(self, raw: bytes, timeout_s: float) -> Outcome:
        while self.idle:
            conn = self.idle.pop()
            if not conn.closed:
                break
        else:
            try:
                conn = await connect(self.host, self.port, timeout_s)
            except (OSError, TimeoutError) as exc:
                return Outcome(error=f"connect error ({exc.__class__.__name__})")
        out = await conn.send(raw, timeout_s)
        if out.error or not conn.keep_alive or conn.closed:
            conn.close()
        else:
            self.idle.append(conn)
        return out

    def close(self) -> None:
        for conn in self.idle:
            conn.close()
        self.idle.clear()


@dataclass(slots=True)
class PacedRun:
    latencies_s: list[list[float]]  # per target, full response time of each 200 answer
    errors: list[Counter[str]]


async def paced_alternating(
    targets: list[tuple[str, int, bytes]], rps: float, seconds: float, timeout_s: float, warm: int = 20
) -> PacedRun:
    """Each target at `rps` requests/s, open loop, their send times interleaved evenly (target k at
    offset k/len(targets) of each period), so every target sees the same machine load.

    `warm` sequential requests per target first, so no connection set-up lands in a sample.
    """
    pools = [KeepAlivePool(h, p) for h, p, _ in targets]
    run = PacedRun([[] for _ in targets], [Counter() for _ in targets])
    try:
        for _ in range(warm):
            for pool, (_, _, raw) in zip(pools, targets, strict=True):
                await pool.request(raw, timeout_s)

        async def fire(k: int) -> None:
            out = await pools[k].request(targets[k][2], timeout_s)
            if out.error:
                run.errors[k][out.error] += 1
            elif out.total_s is not None:
                run.latencies_s[k].append(out.total_s)

        period = 1.0 / rps
        ticks = int(seconds * rps)
        start = time.perf_counter()
        tasks: list[asyncio.Task[None]] = []
        for i in range(ticks):
            for k in range(len(targets)):
                delay = start + (i + k / len(targets)) * period - time.perf_counter()
                if delay > 0:
                    await asyncio.sleep(delay)
                tasks.append(asyncio.ensure_future(fire(k)))
        await asyncio.gather(*tasks)
    finally:
        for pool in pools:
            pool.close()
    return run


async def sequential(host: str, port: int, raw: bytes, n: int, timeout_s: float) -> PacedRun:
    """`n` requests one after another on a keep-alive connection (the large-prompt probe)."""
    pool = KeepAlivePool(host, port)
    run = PacedRun([[]], [Counter()])
    try:
        for _ in range(n):
            out = await pool.request(raw, timeout_s)
            if out.error:
                run.errors[0][out.error] += 1
            elif out.total_s is not None:
                run.latencies_s[0].append(out.total_s)
    finally:
        pool.close()
    return run


def raise_nofile() -> int:
    """Lift the soft open-files limit to the hard one (children started afterwards inherit it): 2,000
    streams need 2,000 client sockets here and two per stream in every proxy."""
    import resource

    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    with contextlib.suppress(ValueError, OSError):
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
        soft = hard
    return soft
