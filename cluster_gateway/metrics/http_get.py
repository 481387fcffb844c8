"""A lean keep-alive HTTP/1.1 GET client for scraping pods.

The scraper issues ten requests a second per pod from the gateway's own event loop. A general
client (httpx/httpcore) spends ~1.5 ms of CPU per request here, and its pool scans every pooled
connection on each request, so a few hundred pods would eat the cores the request path needs.
Scrapes only ever GET small bodies from plain-HTTP pods, so this client keeps one persistent
connection per pod and parses just what such a response needs: the status line, Content-Length or
chunked framing, and `Connection: close`.
"""

from __future__ import annotations

import asyncio
import socket

__all__ = ["HttpGetError", "PodConnection"]

_HEAD_LIMIT = 64 * 1024


class HttpGetError(Exception):
    """The pod's answer was not a usable HTTP/1.x response (or the connection broke)."""


class PodConnection:
    """One persistent connection to `host:port`, one request at a time; reconnects as needed."""

    def __init__(self, host: str, port: int) -> None:
        self.host = host
        self.port = port
        self._reader: asyncio.StreamReader | None = None
        self._writer: asyncio.StreamWriter | None = None
        self._lock = asyncio.Lock()

    async def get(self, path: str, max_bytes: int) -> tuple[int, bytes]:
        """(status, body) of `GET path`. Any error or cancellation closes the connection."""
        async with self._lock:
            try:
                return await self._get(path, max_bytes, retry_stale=True)
            except BaseException:
                self.close()
                raise

    async def _get(self, path: str, max_bytes: int, *, retry_stale: bool) -> tuple[int, bytes]:
        reused = self._writer is not None
        if self._writer is None:
            await self._connect()
        assert self._reader is not None and self._writer is not None
        self._writer.write(
            f"GET {path} HTTP/1.1\r\nHost: {self.host}:{self.port}\r\nAccept-Encoding: identity\r\n"
            "User-Agent: fleetgate-scraper\r\n\r\n".encode("latin-1")
        )
        try:
            head = await self._reader.readuntil(b"\r\n\r\n")
        except (asyncio.IncompleteReadError, ConnectionError) as exc:
            # A keep-alive connection the pod closed while idle: retry once on a fresh one.
            self.close()
            if reused and retry_stale:
                return await self._get(path, max_bytes, retry_stale=False)
            raise HttpGetError(f"connection closed before a response: {exc}") from None
        except asyncio.LimitOverrunError:
            raise HttpGetError("response header too large") from None
        status, length, chunked, close = _parse_head(head)
        if chunked:
            body = await self._read_chunked(max_bytes)
        elif length is not None:
            if length > max_bytes:
                raise HttpGetError(f"body of {length} bytes exceeds {max_bytes}")
            body = await self._reader.readexactly(length)
        else:  # no framing: the body runs to the end of the connection
            body = await self._reader.read(max_bytes + 1)
            while not self._reader.at_eof() and len(body) <= max_bytes:
                body += await self._reader.read(max_bytes + 1 - len(body))
            if len(body) > max_bytes:
                raise HttpGetError(f"body exceeds {max_bytes} bytes")
            close = True
        if close:
            self.close()
        return status, body

    async def _read_chunked(self, max_bytes: int) -> bytes:
        assert self._reader is not None
        parts: list[bytes] = []
        total = 0
        while True:
            size_line = await self._reader.readuntil(b"\r\n")
            try:
                size = int(size_line.split(b";", 1)[0].strip(), 16)
            except ValueError:
                raise HttpGetError(f"bad chunk size {size_line[:20]!r}") from None
            if size == 0:
                # Trailers (if any) end with an empty line.
                while await self._reader.readuntil(b"\r\n") != b"\r\n":
                    pass
                return b"".join(parts)
            total += size
            if total > max_bytes:
                raise HttpGetError(f"body exceeds {max_bytes} bytes")
            parts.append(await self._reader.readexactly(size))
            if await self._reader.readexactly(2) != b"\r\n":
                raise HttpGetError("chunk not terminated by CRLF")

    async def _connect(self) -> None:
        try:
            self._reader, self._writer = await asyncio.open_connection(
                self.host, self.port, limit=_HEAD_LIMIT
            )
        except OSError as exc:
            raise ConnectionError(f"cannot connect to {self.host}:{self.port}: {exc}") from exc
        sock = self._writer.get_extra_info("socket")
        if sock is not None:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def close(self) -> None:
        if self._writer is not None:
            self._writer.close()
        self._reader = self._writer = None


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
