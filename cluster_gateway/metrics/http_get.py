"""A lean keep-alive HTTP/1.1 GET client for scraping pods.

The scraper issues ten requests a second per pod from the gateway's own event loop. A general
client (httpx/httpcore) spends ~1.5 ms of CPU per request here, and its pool scans every pooled
connection on each request, so a few hundred pods would eat the cores the request path needs.
Scrapes only ever GET small bodies from plain-HTTP pods, so this client keeps one persistent
connection per pod and parses just what such a response needs: the status line, Content-Length or
chunked framing, and `Connection: close`. It is an `asyncio.Protocol` rather than streams: on a
virtualised 2-core box a GET over asyncio streams cost ~130-200 µs of CPU, several times the
syscalls' own cost, in reader/writer layers and per-read futures a 2 KB answer does not need.
"""

from __future__ import annotations

import asyncio
import socket
from typing import cast

__all__ = ["HttpGetError", "PodConnection"]

_HEAD_LIMIT = 64 * 1024
_FIXED_HEADERS = "Accept-Encoding: identity\r\nUser-Agent: fleetgate-scraper\r\n"


class HttpGetError(Exception):
    """The pod's answer was not a usable HTTP/1.x response (or the connection broke)."""


class _Reader(asyncio.Protocol):
    """Collects one response at a time straight from the transport's callbacks: no stream layer,
    no per-read futures. `data_received` completes the waiting request once its framing is whole."""

    def __init__(self) -> None:
        self.transport: asyncio.Transport | None = None
        self.buf = bytearray()
        self.eof = False
        self.waiter: asyncio.Future[tuple[int, bytes]] | None = None
        self.max_bytes = 0
        self._head: tuple[int, int | None, bool, bool] | None = None
        self._head_end = 0
        self.got_bytes = False  # some of the current response arrived (a stale reuse has none)

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)

    def data_received(self, data: bytes) -> None:
        self.buf += data
        self.got_bytes = True
        self._advance()

    def eof_received(self) -> bool:
        self.eof = True
        self._advance()
        return False  # close the transport

    def connection_lost(self, exc: Exception | None) -> None:
        self.eof = True
        self._advance()

    def start(self, max_bytes: int) -> asyncio.Future[tuple[int, bytes]]:
        self.waiter = asyncio.get_running_loop().create_future()
        self.max_bytes = max_bytes
        self._head = None
        self.got_bytes = bool(self.buf)
        self._advance()
        return self.waiter

    def _advance(self) -> None:
        waiter = self.waiter
        if waiter is None or waiter.done():
            return
        try:
            result = self._complete()
        except HttpGetError as exc:
            waiter.set_exception(exc)
            return
        if result is not None:
            waiter.set_result(result)
        elif self.eof:
            what = "in the middle of a response" if self.got_bytes else "before a response"
            waiter.set_exception(_Closed(f"connection closed {what}", stale=not self.got_bytes))

    def _complete(self) -> tuple[int, bytes] | None:
        buf = self.buf
        if self._head is None:
            end = buf.find(b"\r\n\r\n")
            if end < 0:
                if len(buf) > _HEAD_LIMIT:
                    raise HttpGetError("response header too large")
                return None
            self._head_end = end + 4
            self._head = _parse_head(bytes(buf[: self._head_end]))
        status, length, chunked, close = self._head
        start = self._head_end
        if chunked:
            framed = _chunked_body(buf, start, self.max_bytes)
            if framed is None:
                return None
            body, used = framed
        elif length is not None:
            if length > self.max_bytes:
                raise HttpGetError(f"body of {length} bytes exceeds {self.max_bytes}")
            if len(buf) - start < length:
                return None
            body, used = bytes(buf[start : start + length]), start + length
        else:  # no framing: the body runs to the end of the connection
            if len(buf) - start > self.max_bytes:
                raise HttpGetError(f"body exceeds {self.max_bytes} bytes")
            if not self.eof:
                return None
            body, used, close = bytes(buf[start:]), len(buf), True
        del buf[:used]
        if close:
            self.eof = True  # no further request on this connection
        return status, body


class _Closed(HttpGetError):
    def __init__(self, message: str, *, stale: bool) -> None:
        super().__init__(message)
        self.stale = stale


def _chunked_body(buf: bytearray, start: int, max_bytes: int) -> tuple[bytes, int] | None:
    """(body, bytes used) of a whole chunked body at `buf[start:]`, or None while incomplete."""
    parts: list[bytes] = []
    total = 0
    pos = start
    while True:
        eol = buf.find(b"\r\n", pos)
        if eol < 0:
            return None
        try:
            size = int(bytes(buf[pos:eol]).split(b";", 1)[0].strip(), 16)
        except ValueError:
            raise HttpGetError(f"bad chunk size {bytes(buf[pos:eol])[:20]!r}") from None
        pos = eol + 2
        if size == 0:
            while True:  # trailers (if any) end with an empty line
                eol = buf.find(b"\r\n", pos)
                if eol < 0:
                    return None
                empty = eol == pos
                pos = eol + 2
                if empty:
                    return b"".join(parts), pos
        total += size
        if total > max_bytes:
            raise HttpGetError(f"body exceeds {max_bytes} bytes")
        if len(buf) < pos + size + 2:
            return None
        parts.append(bytes(buf[pos : pos + size]))
        if buf[pos + size : pos + size + 2] != b"\r\n":
            raise HttpGetError("chunk not terminated by CRLF")
        pos += size + 2


class PodConnection:
    """One persistent connection to `host:port`, one request at a time; reconnects as needed."""

    def __init__(self, host: str, port: int) -> None:
        self.host = host
        self.port = port
        self._proto: _Reader | None = None
        self._lock = asyncio.Lock()
        self._request_tail = f" HTTP/1.1\r\nHost: {host}:{port}\r\n{_FIXED_HEADERS}\r\n".encode("latin-1")

    @property
    def connected(self) -> bool:
        return self._proto is not None

    async def get(self, path: str, max_bytes: int) -> tuple[int, bytes]:
        """(status, body) of `GET path`. Any error or cancellation closes the connection."""
        return await self.request(b"GET " + path.encode("latin-1") + self._request_tail, max_bytes)

    async def post(self, path: str, body: bytes, max_bytes: int, headers: bytes = b"") -> tuple[int, bytes]:
        """(status, body) of `POST path` with `body`; `headers`: extra `Name: value\\r\\n` lines."""
        head = self._request_tail[:-2] + headers + b"Content-Length: %d\r\n\r\n" % len(body)
        return await self.request(b"POST " + path.encode("latin-1") + head + body, max_bytes)

    async def request(self, raw: bytes, max_bytes: int) -> tuple[int, bytes]:
        """Send one whole request `raw`; (status, body) of the answer."""
        async with self._lock:
            try:
                return await self._send(raw, max_bytes, retry_stale=True)
            except BaseException:
                self.close()
                raise

    async def _send(self, raw: bytes, max_bytes: int, *, retry_stale: bool) -> tuple[int, bytes]:
        proto = self._proto
        reused = proto is not None and not proto.eof
        if proto is None or proto.eof:
            self.close()
            proto = await self._connect()
        assert proto.transport is not None
        proto.transport.write(raw)
        try:
            status, body = await proto.start(max_bytes)
        except _Closed as exc:
            # A keep-alive connection the pod closed while idle: retry once on a fresh one.
            self.close()
            if exc.stale and reused and retry_stale:
                return await self._send(raw, max_bytes, retry_stale=False)
            raise
        finally:
            proto.waiter = None
        if proto.eof:
            self.close()
        return status, body

    async def _connect(self) -> _Reader:
        loop = asyncio.get_running_loop()
        try:
            _, proto = await loop.create_connection(_Reader, self.host, self.port)
        except OSError as exc:
            raise ConnectionError(f"cannot connect to {self.host}:{self.port}: {exc}") from exc
        assert proto.transport is not None
        sock = proto.transport.get_extra_info("socket")
        if sock is not None:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self._proto = proto
        return proto

    def close(self) -> None:
        if self._proto is not None and self._proto.transport is not None:
            self._proto.transport.close()
        self._proto = None


def _parse_head(head: bytes) -> tuple[int, int | None, bool, bool]:
    """(status, content-length, chunked, connection-close) from a response head."""
    lines = head.decode("latin-1").split("\r\n")
    parts = lines[0].split(" ", 2)
    if len(parts) < 2 or not parts[0].startswith("HTTP/1."):
        raise HttpGetError(f"not an HTTP/1.x response: {lines[0][:60]!r}")
    try:
        status = int(parts[1])
    except ValueError:
        raise HttpGetError(f"bad status line {lines[0][:60]!r}") from None
    length: int | None = None
    chunked = False
    close = parts[0] == "HTTP/1.0"
    for line in lines[1:]:
        name, sep, value = line.partition(":")
        if not sep:
            continue
        key = name.strip().lower()
        if key == "content-length":
            try:
                length = int(value.strip())
            except ValueError:
                raise HttpGetError(f"bad content-length {value.strip()[:20]!r}") from None
        elif key == "transfer-encoding":
            chunked = "chunked" in value.lower()
        elif key == "connection":
            token = value.strip().lower()
            close = token == "close" or (close and token != "keep-alive")
    if status in (204, 304) or 100 <= status < 200:
        length = 0
    return status, length, chunked, close
