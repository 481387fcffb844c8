"""The HTTP server both tiers run: uvicorn's httptools protocol with connection hygiene and JSON errors.

uvicorn alone keeps a connection that never finishes its headers open forever (slowloris), keeps a
connection that connects and sends nothing open forever, and answers a malformed request or its
concurrency limit in text/plain. This protocol adds, per connection:

- a header timeout: from the first byte of a request (or the connection's start) to the end of its
  headers, `header_timeout_s`; past it the connection is closed (a keep-alive connection between
  requests is governed by uvicorn's `timeout_keep_alive` instead);
- a cap on open connections: the connection over `max_connections` gets a 503 JSON answer and is
  closed at once, so a flood of sockets cannot exhaust file descriptors or memory;
- OpenAI-format JSON for the parse errors uvicorn itself answers (400);
- a `DirectBody` in each request's scope, through which a streamed body is written without an ASGI
  message per chunk (`response_stream.py`), and a `DisconnectHook` fired when the client leaves
  mid-request (`disconnect_hook.py`);
- a response's head written together with its first body bytes, and an interim `100 Continue` left
  out when the final head follows within `CONTINUE_DELAY_S` of a request that came whole
  (`HeadWithBody`).

httptools (llhttp, C) instead of h11 because the pure-Python parser was a visible share of the
proxy's CPU at concurrency 64; `bench/throughput.py` measures the whole path.
"""

from __future__ import annotations

import asyncio
import weakref
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import msgspec
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

from common.disconnect_hook import DISCONNECT_HOOK, DisconnectHook, disconnect_hook
from common.errors import error_body
from common.response_stream import DIRECT_BODY, DirectBody

DEFAULT_HEADER_TIMEOUT_S = 10.0
DEFAULT_MAX_CONNECTIONS = 10_000


@dataclass(frozen=True, slots=True)
class ConnectionLimits:
    header_timeout_s: float = DEFAULT_HEADER_TIMEOUT_S
    max_connections: int = DEFAULT_MAX_CONNECTIONS


def _json_response(status: int, reason: bytes, message: str, code: str) -> bytes:
    body = msgspec.json.encode(
        error_body(message, type="server_error" if status >= 500 else "invalid_request_error", code=code)
    )
    return (
        b"HTTP/1.1 " + str(status).encode() + b" " + reason + b"\r\ncontent-type: application/json\r\n"
        b"content-length: " + str(len(body)).encode() + b"\r\nconnection: close\r\n\r\n" + body
    )


TOO_MANY_CONNECTIONS = _json_response(
    503,
    b"Service Unavailable",
    "Too many open connections to this server; retry later.",
    "too_many_connections",
)


_CONTINUE = b"HTTP/1.1 100 Continue\r\n\r\n"


CONTINUE_DELAY_S = 0.05  # an interim 100 for a request whose body came whole waits this long


class HeadWithBody:
    """The transport of one response as uvicorn's cycle sees it: the head is held until the body's
    first bytes and goes out with them in one write.

    uvicorn writes the head at `http.response.start` and the body at the next message, two send
    calls where one does; and the peer (a client, or the global router reading a gateway) wakes and
    parses twice. Both tiers send the body's first bytes right after the start, so the head is held
    at most until then, and never past the current loop iteration (a flush is scheduled).

    The interim `100 Continue` uvicorn writes for `expect: 100-continue` goes out at once while the
    request's body is still to come (the client may be waiting for it before sending the body). When
    the body came whole with the head, as the global router sends it, the 100 only acknowledges the
    request (the router's ack deadline); it is then held for `continue_delay_s` and dropped if the
    final head goes out first, which acknowledges as well (RFC 9110 §10.1.1 lets a server that
    has the content omit the 100). A fast answer (a short completion, a 4xx or a 429) then costs
    the peer one write and one wake-up, not two; a slow one gets its 100 after the delay."""

    __slots__ = ("_body_complete", "_continue", "_delay", "_done", "_flush_handle", "_held", "_loop", "_t")

    def __init__(
        self,
        transport: Any,
        loop: asyncio.AbstractEventLoop,
        body_complete: Callable[[], bool] = lambda: False,
        continue_delay_s: float | None = None,
    ) -> None:
        self._t = transport
        self._loop = loop
        self._body_complete = body_complete
        self._delay = CONTINUE_DELAY_S if continue_delay_s is None else continue_delay_s
        self._held: bytes | None = None
        self._flush_handle: asyncio.Handle | None = None
        self._continue: asyncio.TimerHandle | None = None
        self._done = False

    def write(self, data: bytes) -> None:
        if self._done:
            self._t.write(data)
            return
        held = self._held
        if held is None:
            if data == _CONTINUE:
                if self._body_complete():
                    self._continue = self._loop.call_later(self._delay, self._send_continue)
                else:
                    self._t.write(data)
                return
            self._drop_continue()  # the final head acknowledges the request
            self._held = data
            self._flush_handle = self._loop.call_soon(self.flush)
            return
        self._done = True
        self._held = None
        if self._flush_handle is not None:
            self._flush_handle.cancel()
            self._flush_handle = None
        self._t.write(held + data)

    def _send_continue(self) -> None:
        self._continue = None
        if self._held is None and not self._done and not self._t.is_closing():
            self._t.write(_CONTINUE)

    def _drop_continue(self) -> None:
        if self._continue is not None:
            self._continue.cancel()
            self._continue = None

    def flush(self) -> None:
        self._flush_handle = None
        if self._held is not None:
            held, self._held = self._held, None
            self._done = True
            if not self._t.is_closing():  # the client left within the iteration: nothing to send
                self._t.write(held)

    def close(self) -> None:
        self._drop_continue()
        self.flush()
        self._t.close()

    def is_closing(self) -> bool:
        return bool(self._t.is_closing())


def guarded_protocol(limits: ConnectionLimits) -> type[HttpToolsProtocol]:
    """An `HttpToolsProtocol` class enforcing `limits` (pass as `uvicorn.Config(http=...)`)."""

    class GuardedHttpToolsProtocol(HttpToolsProtocol):
        _header_timer: asyncio.TimerHandle | None = None

        def connection_made(self, transport: Any) -> None:
            super().connection_made(transport)
            if len(self.connections) > limits.max_connections:
                transport.write(TOO_MANY_CONNECTIONS)
                transport.close()
                return
            self._arm()

        def _arm(self) -> None:
            if self._header_timer is None:
                self._header_timer = self.loop.call_later(limits.header_timeout_s, self._headers_too_slow)

        def _disarm(self) -> None:
            if self._header_timer is not None:
                self._header_timer.cancel()
                self._header_timer = None

        def _headers_too_slow(self) -> None:
            self._header_timer = None
            if self.cycle is None or self.cycle.response_complete:  # no request being served
                self.transport.close()

        def on_message_begin(self) -> None:
            super().on_message_begin()
            self._arm()

        def on_headers_complete(self) -> None:
            self._disarm()
            super().on_headers_complete()
            cycle = self.cycle
            if cycle is not None and cycle.scope is self.scope:  # not an upgrade handed elsewhere
                ref = weakref.ref(cycle)  # weak: the cycle holds this transport (no GC cycle per request)
                cycle.transport = HeadWithBody(  # type: ignore[assignment]
                    self.transport, self.loop, lambda: (c := ref()) is not None and not c.more_body
                )
                ext: dict[str, Any] = self.scope.setdefault("extensions", {})
                ext[DIRECT_BODY] = {"writer": DirectBody(cycle)}
                ext[DISCONNECT_HOOK] = DisconnectHook()

        def connection_lost(self, exc: Exception | None) -> None:
            self._disarm()
            super().connection_lost(exc)
            # what uvicorn's receive() would report as http.disconnect: the current request, and
            # any waiting in the pipeline, lost their client
            for cycle in (self.cycle, *(c for c, _ in self.pipeline)):
                if cycle is not None and not cycle.response_complete:
                    hook = disconnect_hook(cycle.scope)
                    if hook is not None:
                        hook.fire()

        def send_400_response(self, msg: str) -> None:
            self.transport.write(_json_response(400, b"Bad Request", msg, "invalid_http_request"))
            self.transport.close()

    return GuardedHttpToolsProtocol
