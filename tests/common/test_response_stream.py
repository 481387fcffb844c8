"""`StreamBody` on the servers' real uvicorn protocol (common/response_stream.py): chunks are written
straight to the socket, framed as uvicorn frames them, while the client keeps up; when the client
stops reading, `push` refuses and `put` waits, and every byte still arrives in order; a response
that is not chunked, or a server without the extension, always goes through `send`."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator
from dataclasses import dataclass, field

from common.asgi import EmbeddedServer, listen_socket, server_config
from common.config.server import HttpServer
from common.http import Receive, Scope, Send
from common.response_stream import StreamBody
from tests.both_loops import on_both_loops

WAIT_S = 10.0  # the bound on every wait for a condition below
log = logging.getLogger("test")


@dataclass
class App:
    """Streams `parts` chunks of `size` bytes (chunk i filled with byte i % 251)."""

    parts: int = 50
    size: int = 100
    length: bool = False  # answer with a content-length instead of chunked
    pushed: int = 0
    put: int = 0
    refused: asyncio.Event = field(default_factory=asyncio.Event)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            return
        while (await receive()).get("more_body"):
            pass
        headers = [(b"content-type", b"text/event-stream")]
        if self.length:
            headers.append((b"content-length", str(self.parts * self.size).encode()))
        await send({"type": "http.response.start", "status": 200, "headers": headers})
        body = StreamBody(scope, send)
        for i in range(self.parts):
            data = bytes([i % 251]) * self.size
            if body.push(data):
                self.pushed += 1
            else:
                self.put += 1
                self.refused.set()
                await body.put(data)
        await send({"type": "http.response.body", "body": b"", "more_body": False})


def expected(app: App) -> bytes:
    return b"".join(bytes([i % 251]) * app.size for i in range(app.parts))


@contextlib.asynccontextmanager
async def serving(app: App) -> AsyncIterator[int]:
    srv = EmbeddedServer(server_config(app, HttpServer()))
    port = await srv.start_on(listen_socket("127.0.0.1", 0))
    try:
        yield port
    finally:
        await srv.stop(log)


REQUEST = b"POST /s HTTP/1.1\r\nhost: t\r\ncontent-length: 2\r\n\r\n{}"


async def read_chunked(reader: asyncio.StreamReader) -> bytes:
    """The body of a chunked response, checking its framing chunk by chunk."""
    head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), WAIT_S)
    assert b"transfer-encoding: chunked" in head.lower()
    body: list[bytes] = []
    while True:
        size = int((await asyncio.wait_for(reader.readuntil(b"\r\n"), WAIT_S))[:-2], 16)
        data = await asyncio.wait_for(reader.readexactly(size + 2), WAIT_S)
        assert data[-2:] == b"\r\n"
        if size == 0:
            return b"".join(body)
        body.append(data[:-2])


@on_both_loops
async def test_a_client_that_keeps_up_gets_every_chunk_written_directly() -> None:
    app = App()
    async with serving(app) as port:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        for _ in range(2):  # and again on the same keep-alive connection
            writer.write(REQUEST)
            assert await read_chunked(reader) == expected(app)
        writer.close()
    assert (app.pushed, app.put) == (2 * app.parts, 0)


@on_both_loops
async def test_a_client_that_stops_reading_is_waited_for_and_loses_nothing() -> None:
    app = App(parts=1024, size=32 * 1024)  # 32 MB: more than the kernel's buffers hold
    async with serving(app) as port:
        reader, writer = await asyncio.open_connection("127.0.0.1", port, limit=1 << 16)
        writer.transport.pause_reading()  # type: ignore[attr-defined]
        writer.write(REQUEST)
        await asyncio.wait_for(app.refused.wait(), WAIT_S)  # the server's buffer filled up
        writer.transport.resume_reading()  # type: ignore[attr-defined]
        assert await read_chunked(reader) == expected(app)
        writer.close()
    assert app.put > 0 and app.pushed > 0 and app.pushed + app.put == app.parts


@on_both_loops
async def test_a_response_with_a_length_goes_through_send() -> None:
    app = App(length=True)
    async with serving(app) as port:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(REQUEST)
        head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), WAIT_S)
        assert b"content-length: 5000" in head.lower()
        assert await asyncio.wait_for(reader.readexactly(5000), WAIT_S) == expected(app)
        writer.close()
    assert (app.pushed, app.put) == (0, app.parts)


async def test_without_the_servers_extension_every_chunk_goes_through_send() -> None:
    sent: list[bytes] = []

    async def send(msg: dict[str, object]) -> None:
        sent.append(msg["body"])  # type: ignore[arg-type]

    body = StreamBody({"type": "http"}, send)
    assert not body.push(b"a")
    await body.put(b"a")
    assert sent == [b"a"]
