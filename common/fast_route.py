"""A lean HTTP/1.1 path on a uvicorn port for one kind of request: a whole body in, a whole answer out.

Why: Envoy's ext_authz check is one small POST per client request on a pooled keep-alive connection,
and the answer is a status and a few headers. Through uvicorn each check built an ASGI scope, a
request cycle with its `asyncio.Event`, a keep-alive timer, a header timer and a disconnect watcher
task: more of the serving process's CPU than the pick itself (bench/RESULTS.md, "lean check path").

A connection whose first request's path is under `prefix` is served here for its whole life: one
httptools parser, the handler run at once up to its first wait (a task only for a handler that
waits), the answer written as one buffer. Any other connection is
handed to the uvicorn protocol at its first request's headers, with the bytes read so far (the same
handover uvicorn does for a WebSocket upgrade), so the port keeps serving everything else unchanged.
Envoy's check cluster has its own connection pool, so its connections carry checks only; a request
outside `prefix` on a fast connection gets a JSON 421 and the connection closes.

Connection hygiene matches `http_server.py`: the `max_connections` cap (counted with uvicorn's own
connections), a header timeout and the keep-alive idle timeout, both from one lazy timer per
connection that requests only stamp, and JSON for every error this layer answers itself.
"""

from __future__ import annotations

import asyncio
import contextvars
import logging
import urllib.parse
from collections import deque
from collections.abc import Callable, Coroutine, Generator
from dataclasses import dataclass, field
from http import HTTPStatus
from typing import Any, cast

import httptools

from common.errors import OpenAIError, body_too_large, internal_error
from common.http import RawHeaders
from common.http_server import TOO_MANY_CONNECTIONS, ConnectionLimits

log = logging.getLogger("fleetgate.http")


@dataclass(slots=True)
class Answer:
    """A complete answer. `undelivered` runs when the connection closed before it could be written
    (the work behind it, e.g. a pod slot, is then released at once instead of by a TTL)."""

    status: int
    headers: RawHeaders = field(default_factory=list)
    body: bytes = b""
    undelivered: Callable[[], None] | None = None


Handler = Callable[[str, str, RawHeaders, bytes], Coroutine[Any, Any, Answer]]
"""(method, path, headers with lower-case names, body) -> the answer."""

_REASONS = {s.value: s.phrase.encode() for s in HTTPStatus}


def encode_answer(answer: Answer, keep_alive: bool) -> bytes:
    parts = [b"HTTP/1.1 %d %s\r\n" % (answer.status, _REASONS.get(answer.status, b""))]
    for name, value in answer.headers:
        parts += [name, b": ", value, b"\r\n"]
    parts.append(b"content-length: %d\r\n" % len(answer.body))
    if not keep_alive:
        parts.append(b"connection: close\r\n")
    parts += [b"\r\n", answer.body]
    return b"".join(parts)


def error_answer(err: OpenAIError) -> Answer:
    """An OpenAI-format error as an answer: JSON body, the error's own headers (e.g. Retry-After)."""
    hdrs = [(b"content-type", b"application/json")]
    hdrs += [(k.encode("latin-1"), v.encode("latin-1")) for k, v in err.headers.items()]
    return Answer(err.status, hdrs, err.body_bytes())


@dataclass(slots=True)
class _Request:
    method: str
    path: str
    headers: RawHeaders
    body: bytes
    keep_alive: bool


def fast_route_protocol(
    prefix: str,
    handler: Handler,
    fallback: Callable[..., asyncio.Protocol],
    limits: ConnectionLimits,
    max_body_bytes: int,
) -> Callable[..., asyncio.Protocol]:
    """A protocol factory for `uvicorn.Config(http=...)`: `prefix` here, the rest to `fallback`
    (a uvicorn HTTP protocol class, e.g. `http_server.guarded_protocol(limits)`)."""

    def make(config: Any, server_state: Any, app_state: Any, _loop: Any = None) -> asyncio.Protocol:
        return FastRouteProtocol(
            prefix, handler, fallback, limits, max_body_bytes, config, server_state, app_state, _loop
        )

    return make


class FastRouteProtocol(asyncio.Protocol):
    """One connection: undecided until its first request's headers, then fast or handed over."""

    def __init__(
        self,
        prefix: str,
        handler: Handler,
        fallback: Callable[..., asyncio.Protocol],
        limits: ConnectionLimits,
        max_body_bytes: int,
        config: Any,
        server_state: Any,
        app_state: Any,
        loop: asyncio.AbstractEventLoop | None = None,
    ) -> None:
        self.prefix = prefix
        self.handler = handler
        self.fallback = fallback
        self.limits = limits
        self.max_body = max_body_bytes
        self.config, self.server_state, self.app_state = config, server_state, app_state
        self.loop = loop or asyncio.get_event_loop()
        self.connections: set[Any] = server_state.connections  # uvicorn's, for its cap and shutdown
        self.tasks: set[asyncio.Task[Any]] = server_state.tasks
        self.keep_alive_s = float(config.timeout_keep_alive)
        self.parser = httptools.HttpRequestParser(self)
        self.transport: asyncio.Transport | None = None
        self.raw: list[bytes] | None = []  # the bytes read while undecided, for a handover
        self.fast = False
        self.hand_over = False
        self.closing = False  # shut down: close once the request in progress is answered
        self.queue: deque[_Request] = deque()  # complete requests behind the one being answered
        self.busy: asyncio.Task[Answer] | None = None
        self.busy_keep_alive = True
        # the message being parsed
        self.in_headers = False
        self.in_message = False
        self.url = b""
        self.headers: RawHeaders = []
        self.body: list[bytes] = []
        self.size = 0
        self.method = ""
        self.path = ""
        self.rejected = False
        # one lazy timer: requests only stamp these, the timer checks them when it fires
        self.started_at = self.last_at = self.loop.time()
        self.timer: asyncio.TimerHandle | None = None

    # --- connection --------------------------------------------------------------------------
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)  # uvloop's is not a subclass
        self.connections.add(self)
        if len(self.connections) > self.limits.max_connections:
            self.transport.write(TOO_MANY_CONNECTIONS)
            self.transport.close()
            return
        self.in_headers = True  # the header timeout runs from the connection's start
        self._arm(self.limits.header_timeout_s)

    def connection_lost(self, exc: Exception | None) -> None:
        self.connections.discard(self)
        if self.timer is not None:
            self.timer.cancel()
            self.timer = None
        self.queue.clear()
        if self.busy is not None:
            self.busy.cancel()  # the client (Envoy: its check timeout) gave up; nothing to answer

    def shutdown(self) -> None:
        """uvicorn's stop: close when idle, else after the answer in progress."""
        self.closing = True
        if self.busy is None and self.transport is not None:
            self.transport.close()

    def data_received(self, data: bytes) -> None:
        if self.raw is not None:
            self.raw.append(data)
        try:
            self.parser.feed_data(data)
        except httptools.HttpParserUpgrade:
            if not self.fast:
                self.hand_over = True  # uvicorn answers upgrades
            else:
                self._fail(OpenAIError(400, "Upgrade is not served on this connection."))
        except httptools.HttpParserError:
            if not self.fast:
                self.hand_over = True  # uvicorn's guarded protocol answers it in JSON
            else:
                self._fail(OpenAIError(400, "Invalid HTTP request received.", code="invalid_http_request"))
                return
        if self.hand_over:
            self._hand_over()

    def _hand_over(self) -> None:
        assert self.transport is not None and self.raw is not None
        raw, self.raw = b"".join(self.raw), None
        self.connections.discard(self)
        if self.timer is not None:
            self.timer.cancel()
            self.timer = None
        proto = self.fallback(config=self.config, server_state=self.server_state, app_state=self.app_state)
        self.transport.set_protocol(proto)
        proto.connection_made(self.transport)
        if not self.transport.is_closing():
            proto.data_received(raw)

    # --- parser callbacks --------------------------------------------------------------------
    def on_message_begin(self) -> None:
        self.url = b""
        self.headers = []
        self.body = []
        self.size = 0
        self.rejected = False
        self.in_message = self.in_headers = True
        self.started_at = self.loop.time()

    def on_url(self, url: bytes) -> None:
        self.url += url

    def on_header(self, name: bytes, value: bytes) -> None:
        self.headers.append((name.lower(), value.rstrip(b" \t")))

    def on_headers_complete(self) -> None:
        self.in_headers = False
        if self.hand_over:
            return
        raw_path = httptools.parse_url(self.url).path
        path = raw_path.decode("latin-1")
        if "%" in path:
            path = urllib.parse.unquote(path)
        if not self.fast:
            if not path.startswith(self.prefix):
                self.hand_over = True
                return
            self.fast = True
            self.raw = None
        self.method = self.parser.get_method().decode("ascii")
        self.path = path
        if not path.startswith(self.prefix):
            self._reject(
                OpenAIError(421, f"This connection serves {self.prefix} only.", code="misdirected_request")
            )
            return
        for name, value in self.headers:
            if name == b"content-length" and value.isdigit() and int(value) > self.max_body:
                self._reject(body_too_large(self.max_body))
                return
            if name == b"expect" and value.lower() == b"100-continue":
                self._continue()

    def on_body(self, body: bytes) -> None:
        if self.hand_over or self.rejected:
            return
        self.size += len(body)
        if self.size > self.max_body:
            self._reject(body_too_large(self.max_body))
            return
        self.body.append(body)

    def on_message_complete(self) -> None:
        self.in_message = False
        if self.hand_over or self.rejected or self.transport is None or self.transport.is_closing():
            return
        req = _Request(
            self.method,
            self.path,
            self.headers,
            b"".join(self.body),
            self.parser.should_keep_alive() and not self.closing,
        )
        self.body = []
        if self.busy is not None:
            self.queue.append(req)  # pipelined: answered in order
            if self.transport is not None:
                self.transport.pause_reading()
            return
        self._start(req)

    def _continue(self) -> None:
        """The interim 100, unless an earlier request's answer is pending (it would overtake it)."""
        if self.transport is not None and self.busy is None and not self.queue:
            self.transport.write(b"HTTP/1.1 100 Continue\r\n\r\n")

    # --- answering ---------------------------------------------------------------------------
    def _start(self, req: _Request) -> None:
        """Run the handler at once, up to its first wait: most checks never wait (the pick is
        synchronous unless the admission queue holds it), and then no task is made at all."""
        self.busy_keep_alive = req.keep_alive
        coro = self.handler(req.method, req.path, req.headers, req.body)
        ctx = contextvars.copy_context()  # what the handler sets stays its own, as in a task
        try:
            waiting = ctx.run(coro.send, None)
        except StopIteration as done:
            self._deliver(done.value)
            return
        except Exception as exc:
            self._deliver(_internal_error(self.prefix, exc))
            return
        task = self.loop.create_task(_resume(coro, waiting), context=ctx)
        self.busy = task
        self.tasks.add(task)
        task.add_done_callback(self._answered)

    def _answered(self, task: asyncio.Task[Answer]) -> None:
        self.tasks.discard(task)
        self.busy = None
        if task.cancelled():
            return
        exc = task.exception()
        self._deliver(task.result() if exc is None else _internal_error(self.prefix, exc))

    def _deliver(self, answer: Answer) -> None:
        transport = self.transport
        if transport is None or transport.is_closing():
            if answer.undelivered is not None:
                answer.undelivered()
            return
        keep_alive = self.busy_keep_alive and not self.closing
        transport.write(encode_answer(answer, keep_alive))
        self.last_at = self.loop.time()
        if not keep_alive:
            transport.close()
        elif self.queue:
            self._start(self.queue.popleft())
        else:
            transport.resume_reading()

    def _reject(self, err: OpenAIError) -> None:
        """Answer now and close: the rest of this message is not read (its body may be huge)."""
        self.rejected = True
        self._fail(err)

    def _fail(self, err: OpenAIError) -> None:
        transport = self.transport
        if transport is None or transport.is_closing():
            return
        if self.busy is None:  # else the request in progress is cancelled by the close
            transport.write(encode_answer(error_answer(err), keep_alive=False))
        transport.close()

    # --- timeouts ----------------------------------------------------------------------------
    def _arm(self, delay: float) -> None:
        self.timer = self.loop.call_later(delay, self._check_timeouts)

    def _check_timeouts(self) -> None:
        """Close a connection stuck in a request's headers, or idle past the keep-alive timeout."""
        self.timer = None
        transport = self.transport
        if transport is None or transport.is_closing():
            return
        now = self.loop.time()
        if self.in_headers:
            left = self.started_at + self.limits.header_timeout_s - now
        elif self.busy is None and not self.in_message and not self.queue:
            left = self.last_at + self.keep_alive_s - now
        else:
            left = self.limits.header_timeout_s  # a request in progress: look again later
        if left <= 0:
            transport.close()
            return
        self._arm(left)


def _internal_error(where: str, exc: BaseException) -> Answer:
    log.error("unhandled error in %s", where, exc_info=exc)
    return error_answer(internal_error())


async def _resume(coro: Coroutine[Any, Any, Answer], waiting: Any) -> Answer:
    """Finish, in a task, a coroutine already run up to its first wait (`waiting`: what it yielded)."""
    return await _Rest(coro, waiting)


class _Rest:
    """Hands the task what the coroutine yields and the coroutine what the task sends or throws,
    as `await` would have from the start (cancellation included)."""

    __slots__ = ("coro", "waiting")

    def __init__(self, coro: Coroutine[Any, Any, Answer], waiting: Any) -> None:
        self.coro = coro
        self.waiting = waiting

    def __await__(self) -> Generator[Any, None, Answer]:
        coro, waiting = self.coro, self.waiting
        while True:
            try:
                yield waiting
            except BaseException as exc:  # thrown into the task (its cancellation): pass it on
                try:
                    waiting = coro.throw(exc)
                except StopIteration as done:
                    return cast(Answer, done.value)
            else:
                try:
                    waiting = coro.send(None)
                except StopIteration as done:
                    return cast(Answer, done.value)
