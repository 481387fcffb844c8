"""The server tells a request's work that its client left (common/disconnect_hook.py), on a real
uvicorn server with both tiers' protocol, on asyncio's loop and on uvloop's: a client that closes
mid-request cancels the work through the hook, with no task waiting in `receive()`; a connection
that closes after its response fires nothing."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator
from dataclasses import dataclass, field

from common.asgi import EmbeddedServer, listen_socket, run_until_disconnect, server_config
from common.config.server import HttpServer
from common.disconnect_hook import DisconnectHook, disconnect_hook
from common.http import Message, Receive, Scope, Send, send_body
from tests.both_loops import on_both_loops
from tests.eventually import eventually

WAIT_S = 10.0  # the bound on every wait below: a condition, not a pause
log = logging.getLogger("test")


@dataclass
class App:
    """`/wait` works until cancelled; `/now` answers at once. Records each request's hook."""

    hooks: list[DisconnectHook | None] = field(default_factory=list)
    started: asyncio.Event = field(default_factory=asyncio.Event)
    cancelled: asyncio.Event = field(default_factory=asyncio.Event)
    receive_calls_during_work: int = 0

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            return
        while (await receive()).get("more_body"):
            pass
        hook = disconnect_hook(scope)
        self.hooks.append(hook)
        if scope["path"] == "/now":
            await send_body(send, 200, b"ok")
            return

        async def counting_receive() -> Message:
            self.receive_calls_during_work += 1
            return await receive()

        async def work() -> None:
            self.started.set()
            try:
                await asyncio.sleep(60)
            except asyncio.CancelledError:
                self.cancelled.set()
                raise

        if not await run_until_disconnect(work(), scope, counting_receive):
            await send_body(send, 200, b"done")


@contextlib.asynccontextmanager
async def serving(app: App) -> AsyncIterator[tuple[int, EmbeddedServer]]:
    srv = EmbeddedServer(server_config(app, HttpServer()))
    port = await srv.start_on(listen_socket("127.0.0.1", 0))
    try:
        yield port, srv
    finally:
        await srv.stop(log, grace_s=1)


async def post(port: int, path: str) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    """A new connection carrying one `POST path` with a small body."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(f"POST {path} HTTP/1.1\r\nhost: t\r\ncontent-length: 2\r\n\r\n{{}}".encode())
    return reader, writer


@on_both_loops
async def test_a_client_that_closes_mid_request_cancels_the_work_through_the_hook() -> None:
    app = App()
    async with serving(app) as (port, _):
        _, writer = await post(port, "/wait")
        await asyncio.wait_for(app.started.wait(), WAIT_S)
        writer.close()
        await asyncio.wait_for(app.cancelled.wait(), WAIT_S)
    assert app.hooks and app.hooks[0] is not None and app.hooks[0].fired
    assert app.receive_calls_during_work == 0  # no watcher task: the server told the work


@on_both_loops
async def test_a_connection_closed_after_its_response_fires_nothing() -> None:
    app = App()
    async with serving(app) as (port, srv):
        reader, writer = await post(port, "/now")
        head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), WAIT_S)
        assert head.startswith(b"HTTP/1.1 200")
        writer.close()
        await eventually(lambda: not srv.server_state.connections, WAIT_S, "the server seeing the close")
    assert app.hooks and app.hooks[0] is not None and not app.hooks[0].fired
