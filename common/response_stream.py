"""A streamed response body written to the client's socket without an ASGI message per chunk.

Both tiers relay token streams: one small chunk every few milliseconds per stream, thousands of
streams at once. Through ASGI each chunk was a message dict, three `send` wrappers and uvicorn's
`send` coroutine, all woken by a task step; with 2,000 streams that was about half of a proxy's
Python time per chunk. The server (`http_server.guarded_protocol`) puts a `DirectBody` for the
current response into the request's scope; `StreamBody` pairs it with the ASGI `send` and is what
`common.upstream`'s `Response.relay` writes to (through `Observed` where a tier watches the bytes):

- `push` frames the chunk as uvicorn does (HTTP/1.1 chunked encoding) and writes it to the
  transport at once, only while uvicorn would have written it too: the response has started,
  chunked, not finished, the client still connected and its write buffer under the high-water mark;
- `put` is the ASGI `send`, which waits for the client to drain; `relay` falls back to it for a
  chunk `push` refuses, so back-pressure and every other case behave exactly as before.

Without the extension (another ASGI server, a test client) `push` refuses and every chunk goes
through `send`.
"""

from __future__ import annotations

import logging
import weakref
from collections.abc import Callable
from typing import Any

from common.http import Send
from common.upstream import BodySink

log = logging.getLogger(__name__)

DIRECT_BODY = "fleetgate.direct_body"  # scope["extensions"][DIRECT_BODY]["writer"] is the DirectBody


class DirectBody:
    """The body of one response on one uvicorn connection (its `RequestResponseCycle`).

    It holds the cycle weakly: the cycle's scope holds this object, and a strong reference would
    make every request's scope and cycle a reference cycle, left to the garbage collector (that
    cost ~10% of the gateway's CPU per non-streamed request)."""

    __slots__ = ("_cycle",)

    def __init__(self, cycle: Any) -> None:
        self._cycle = weakref.ref(cycle)

    def write(self, data: bytes) -> bool:
        """Write one chunk as uvicorn's `send` would; False (nothing written) when it would wait
        or answer otherwise."""
        c = self._cycle()
        if (
            c is None
            or c.chunked_encoding is not True
            or not c.response_started
            or c.response_complete
            or c.disconnected
            or c.flow.write_paused
        ):
            return False
        if data:
            c.transport.write(b"%x\r\n%b\r\n" % (len(data), data))
        return True


class StreamBody:
    """A `common.upstream.BodySink` over ASGI `send` and the server's `DirectBody`, if any."""

    __slots__ = ("_direct", "_send")

    def __init__(self, scope: Any, send: Send) -> None:
        ext = scope.get("extensions")
        direct = ext.get(DIRECT_BODY) if ext else None
        self._direct: DirectBody | None = direct.get("writer") if direct else None
        self._send = send

    def push(self, data: bytes) -> bool:
        direct = self._direct
        return direct is not None and direct.write(data)

    async def put(self, data: bytes) -> None:
        await self._send({"type": "http.response.body", "body": data, "more_body": True})


class Observed:
    """A sink that shows each chunk it wrote to `observe`, whichever way it went (the router counts
    a stream's tokens, the gateway keeps its tail for the usage in its access log)."""

    __slots__ = ("_observe", "_sink")

    def __init__(self, sink: BodySink, observe: Callable[[bytes], None]) -> None:
        self._sink = sink
        self._observe = observe

    def push(self, data: bytes) -> bool:
        if not self._sink.push(data):
            return False
        try:
            self._observe(data)
        except Exception:  # written already: a False here would have the chunk written twice
            log.exception("observing a relayed chunk failed")
        return True

    async def put(self, data: bytes) -> None:
        await self._sink.put(data)
        self._observe(data)
