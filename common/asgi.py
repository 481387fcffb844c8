"""What both tiers' bare ASGI apps share: an embedded uvicorn server, bounded body reading and
cancelling a request's work when its client leaves.

Both the cluster gateway and the global router run uvicorn inside their own event loop (the CLI,
demo and tests own signals and the loop), read request bodies with a hard size cap before any
parsing, and stop upstream work as soon as the client disconnects, so these live once here
instead of twice in each tier.
"""

from __future__ import annotations

import asyncio
import logging
import socket
from collections.abc import Callable, Coroutine
from contextlib import nullcontext
from typing import Any

import uvicorn

from common.config.server import HttpServer
from common.disconnect_hook import disconnect_hook
from common.errors import body_too_large, internal_error
from common.fast_route import Handler, fast_route_protocol
from common.http import Message, Receive, Scope, Send, send_error
from common.http_server import ConnectionLimits, guarded_protocol
from common.listen_error import ListenError

log = logging.getLogger("fleetgate.http")


class ClientGone(Exception):
    """The client disconnected before its request body arrived in full."""


def listen_socket(host: str, port: int, *, reuse_port: bool = False) -> socket.socket:
    """A bound TCP socket whose accepted connections inherit TCP_NODELAY.

    proto=IPPROTO_TCP matters: asyncio sets TCP_NODELAY on accepted sockets only when the socket says
    it is TCP, and uvicorn given a socket does not; Nagle + delayed ACK would add ~40 ms per response.
    """
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    if reuse_port:  # worker processes of one server each listen on the port; the kernel spreads connections
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    try:
        sock.bind((host, port))
    except OSError as exc:
        sock.close()
        raise ListenError(host, port, exc) from None
    sock.set_inheritable(True)
    return sock


def server_config(
    app: Any,
    cfg: HttpServer,
    *,
    log_level: str = "warning",
    fast_route: tuple[str, Handler, int] | None = None,
) -> uvicorn.Config:
    """The uvicorn config both tiers serve with: httptools + connection hygiene (`http_server`), the
    app behind a JSON catch-all, no access log of uvicorn's own, no lifespan.

    `fast_route` (prefix, handler, max body bytes): connections whose first request is under the
    prefix are served by `fast_route.py` instead of the app (Envoy's ext_authz checks)."""
    limits = ConnectionLimits(cfg.header_timeout_s, cfg.max_connections)
    http: Any = guarded_protocol(limits)
    if fast_route is not None:
        prefix, handler, max_body = fast_route
        http = fast_route_protocol(prefix, handler, http, limits, max_body)
    return uvicorn.Config(
        json_errors(app),
        http=http,
        lifespan="off",
        log_level=log_level,
        access_log=False,
        timeout_graceful_shutdown=5,  # a plain stop; a drain (SIGTERM) gives `server.drainTimeoutS`
        proxy_headers=False,  # neither tier reads the client address; it cost ~10% per request
        # Longer than common load-balancer idle timeouts (60 s), so an LB never reuses a
        # connection this server is just closing (the classic keep-alive race → 502s).
        timeout_keep_alive=cfg.keep_alive_timeout_s,
        backlog=4096,
    )


def json_errors(app: Any) -> Any:
    """Wrap an ASGI app so that no failure reaches the client as uvicorn's text/plain 500.

    An exception before the response started becomes a 500 OpenAI error; after it started, the
    connection is closed (the status is out; a truncated body is the honest signal). An app that
    returns without answering also gets the JSON 500.
    """

    async def wrapped(scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await app(scope, receive, send)
            return
        started = False

        async def tracking_send(msg: Message) -> None:
            nonlocal started
            if msg["type"] == "http.response.start":
                started = True
            await send(msg)

        try:
            await app(scope, receive, tracking_send)
        except Exception:
            if started:
                log.warning(
                    "request failed after its response started; closing the connection", exc_info=True
                )
                raise ResponseAborted from None
            log.exception("unhandled error in %s %s", scope.get("method"), scope.get("path"))
            await _send_500(send)
            return
        if not started:
            await _send_500(send)

    return wrapped


class ResponseAborted(Exception):
    """Raised to uvicorn after a response started and then failed: it closes the connection."""


async def _send_500(send: Send) -> None:
    await send_error(send, internal_error())


class EmbeddedServer(uvicorn.Server):
    """uvicorn without its own signal handling, started and stopped by the component that owns it."""

    def __init__(self, config: uvicorn.Config) -> None:
        super().__init__(config)
        self._task: asyncio.Task[None] | None = None

    def capture_signals(self) -> Any:
        return nullcontext()

    async def start_on(self, sock: socket.socket) -> int:
        """Serve on `sock` in a task; return the bound port once uvicorn accepts connections."""
        self._task = asyncio.create_task(self.serve(sockets=[sock]))
        while not self.started:
            if self._task.done():
                self._task.result()
                raise RuntimeError("the HTTP server stopped during startup")
            await asyncio.sleep(0.005)
        return int(sock.getsockname()[1])

    async def stop(self, log: logging.Logger, grace_s: int | None = None) -> None:
        """Stop accepting, close idle connections, let requests in flight finish for `grace_s`
        (default: the config's `timeout_graceful_shutdown`), cancel what is left."""
        if self._task is None:
            return
        if grace_s is not None:
            self.config.timeout_graceful_shutdown = grace_s
        self.should_exit = True
        try:
            await self._task
        except Exception:
            log.exception("HTTP server stopped with an error")
        self._task = None


async def read_body(receive: Receive, declared_length: str | None, max_bytes: int) -> bytes:
    """The whole request body, refused with 413 as soon as it (or its declared length) is too large."""
    if declared_length is not None and declared_length.isdigit() and int(declared_length) > max_bytes:
        raise body_too_large(max_bytes)
    chunks: list[bytes] = []
    size = 0
    while True:
        msg = await receive()
        if msg["type"] == "http.disconnect":
            raise ClientGone
        chunk = msg.get("body", b"")
        size += len(chunk)
        if size > max_bytes:
            raise body_too_large(max_bytes)
        chunks.append(chunk)
        if not msg.get("more_body", False):
            return b"".join(chunks)


async def run_until_disconnect(
    work: Coroutine[Any, Any, None],
    scope: Scope,
    receive: Receive,
    finished: Callable[[], bool] = lambda: False,
) -> bool:
    """Run `work` while watching for the client leaving; True when the client left first.

    A departure cancels the work (so the upstream request and its slot are released at once) unless
    `finished()` says the response is already complete, in which case the work may end normally.
    The work's own exception propagates, including one raised while it is being cancelled; a
    watcher that fails counts as a departure. Cancelling the caller cancels both.

    The work runs in the caller's task. The departure comes from the `DisconnectHook` that both
    tiers' server puts in the request's `scope` (`common/disconnect_hook.py`: no task at all), else
    from a watcher task blocked in `receive` until `http.disconnect` (this runs on every proxied
    request of both tiers).
    """
    hook = disconnect_hook(scope)
    me = asyncio.current_task()
    assert me is not None
    left = False

    def on_leave() -> None:
        nonlocal left
        if not finished():
            left = True
            me.cancel()

    def on_watch_done(t: asyncio.Task[None]) -> None:
        if t.cancelled():
            return
        t.exception()  # retrieved: a failed watcher is a departure, not an unlogged error
        on_leave()

    watch_task: asyncio.Task[None] | None = None
    if hook is not None:
        hook.watch(on_leave)
    else:
        watch_task = asyncio.ensure_future(_disconnected(receive))
        watch_task.add_done_callback(on_watch_done)
    try:
        await work
    except asyncio.CancelledError:
        if not left:
            raise
        me.uncancel()
        return True
    finally:
        if watch_task is None:
            assert hook is not None
            hook.unwatch()
        else:
            watch_task.remove_done_callback(on_watch_done)
            watch_task.cancel()
    if left:  # the departure came as the work was ending: the cancel is still pending
        me.uncancel()
        return True
    return False


async def _disconnected(receive: Receive) -> None:
    while True:
        msg = await receive()
        if msg["type"] == "http.disconnect":
            return
