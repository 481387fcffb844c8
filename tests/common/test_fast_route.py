"""The lean check path (common/fast_route.py) on a real uvicorn server: connections that start with
a request under the prefix are answered by the handler, every other connection by the ASGI app as
before; errors are JSON; slow, idle and excess connections are closed; a client that leaves cancels
the handler, and an answer that could not be delivered is reported back."""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from collections.abc import AsyncIterator
from dataclasses import dataclass, field

from common.asgi import EmbeddedServer, listen_socket, server_config
from common.config.server import HttpServer
from common.fast_route import Answer
from common.http import RawHeaders, Receive, Scope, Send, send_body
from tests.both_loops import on_both_loops

PREFIX = "/_fast"
MAX_BODY = 1000
WAIT_S = 10.0  # the bound on every wait below: a condition, not a pause
log = logging.getLogger("test")


@dataclass
class Handler:
    """Answers `POST {PREFIX}/echo` at once and `{PREFIX}/wait` when `release` is set."""

    release: asyncio.Event = field(default_factory=asyncio.Event)
    started: asyncio.Event = field(default_factory=asyncio.Event)
    cancelled: asyncio.Event = field(default_factory=asyncio.Event)
    undelivered: list[str] = field(default_factory=list)
    swallow_cancel: bool = False
    seen: list[tuple[str, str, bytes]] = field(default_factory=list)

    async def __call__(self, method: str, path: str, headers: RawHeaders, body: bytes) -> Answer:
        self.seen.append((method, path, body))
        if path.endswith("/fail"):
            raise RuntimeError("boom")
        if "/wait" in path:
            self.started.set()
            try:
                await self.release.wait()
            except asyncio.CancelledError:
                self.cancelled.set()
                if not self.swallow_cancel:
                    raise
            if path.endswith("/fail-late"):
                raise RuntimeError("boom")
        name = dict(headers).get(b"x-name", b"")
        return Answer(
            200, [(b"x-echo", name + b":" + body)], undelivered=lambda: self.undelivered.append(path)
        )


async def app(scope: Scope, receive: Receive, send: Send) -> None:
    """The port's ordinary app: says who answered."""
    if scope["type"] != "http":
        return
    body = b""
    while True:
        msg = await receive()
        body += msg.get("body", b"")
        if not msg.get("more_body"):
            break
    await send_body(send, 200, b"asgi:" + scope["path"].encode() + b":" + body)


@contextlib.asynccontextmanager
async def serving(handler: Handler, **server: float) -> AsyncIterator[int]:
    cfg = HttpServer(**server)  # type: ignore[arg-type]
    sock = listen_socket("127.0.0.1", 0)
    srv = EmbeddedServer(server_config(app, cfg, fast_route=(PREFIX, handler, MAX_BODY)))
    port = await srv.start_on(sock)
    try:
        yield port
    finally:
        await srv.stop(log)


def request(path: str, body: bytes = b"", *, method: str = "POST", extra: str = "") -> bytes:
    return (
        f"{method} {path} HTTP/1.1\r\nhost: t\r\ncontent-length: {len(body)}\r\n{extra}\r\n".encode() + body
    )


async def read_response(reader: asyncio.StreamReader) -> tuple[int, dict[str, str], bytes]:
    head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), WAIT_S)
    lines = head.decode("latin-1").split("\r\n")
    status = int(lines[0].split()[1])
    headers = {k.lower(): v.strip() for k, v in (ln.split(":", 1) for ln in lines[1:] if ln)}
    body = await asyncio.wait_for(reader.readexactly(int(headers.get("content-length", "0"))), WAIT_S)
    return status, headers, body


async def closed(reader: asyncio.StreamReader) -> bool:
    return await asyncio.wait_for(reader.read(), WAIT_S) == b""


@on_both_loops
async def test_a_connection_that_starts_with_a_check_stays_on_the_fast_path() -> None:
    h = Handler()
    async with serving(h) as port:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        for i in range(3):  # keep-alive: one connection, three answers
            writer.write(request(f"{PREFIX}/echo", f"b{i}".encode(), extra="x-name: n\r\n"))
            status, headers, body = await read_response(reader)
            assert (status, headers["x-echo"], body) == (200, f"n:b{i}", b"")
        # anything else on this connection is refused in JSON, and the connection closes
        writer.write(request("/v1/models", method="GET"))
        status, headers, body = await read_response(reader)
        assert status == 421 and headers["content-type"] == "application/json"
        assert json.loads(body)["error"]["code"] == "misdirected_request"
        assert await closed(reader)
        writer.close()
    assert [p for _, p, _ in h.seen] == [f"{PREFIX}/echo"] * 3


@on_both_loops
async def test_other_connections_are_handed_to_the_app_with_every_byte() -> None:
    h = Handler()
    async with serving(h) as port:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        raw = request("/v1/chat/completions", b"hello world")
        for i in range(0, len(raw), 7):  # the handover happens mid-body, with what was read so far
            writer.write(raw[i : i + 7])
            await writer.drain()
        assert (await read_response(reader))[2] == b"asgi:/v1/chat/completions:hello world"
        # the app keeps the connection, checks included (the app's own route for them)
        writer.write(request(f"{PREFIX}/echo", b"x"))
        assert (await read_response(reader))[2] == f"asgi:{PREFIX}/echo:x".encode()
        writer.close()
    assert h.seen == []


@on_both_loops
async def test_a_first_request_that_is_not_http_gets_uvicorns_json_400() -> None:
    h = Handler()
    async with serving(h) as port:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(b"\x00\x01 not http\r\n\r\n")
        status, headers, body = await read_response(reader)
        assert status == 400 and headers["content-type"] == "application/json"
        assert json.loads(body)["error"]["code"] == "invalid_http_request"
        writer.close()
    assert h.seen == []


@on_both_loops
async def test_a_client_waiting_for_100_continue_gets_it_before_sending_the_body() -> None:
    h = Handler()
    async with serving(h) as port:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(
            f"POST {PREFIX}/echo HTTP/1.1\r\nhost: t\r\ncontent-length: 4\r\nexpect: 100-continue\r\n\r\n".encode()
        )
        assert (
            await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), WAIT_S) == b"HTTP/1.1 100 Continue\r\n\r\n"
        )
        writer.write(b"body")
        status, headers, _ = await read_response(reader)
        assert (status, headers["x-echo"]) == (200, ":body")
        # behind a request still being answered, no interim 100 may overtake that answer
        expecting = f"POST {PREFIX}/echo HTTP/1.1\r\ncontent-length: 1\r\nexpect: 100-continue\r\n\r\nx"
        writer.write(request(f"{PREFIX}/wait", b"1") + expecting.encode())
        await asyncio.wait_for(h.started.wait(), WAIT_S)
        h.release.set()
        first, second = await read_response(reader), await read_response(reader)
        assert (first[0], first[1]["x-echo"], second[0], second[1]["x-echo"]) == (200, ":1", 200, ":x")
        writer.close()


@on_both_loops
async def test_bad_input_on_the_fast_path_is_json() -> None:
    h = Handler()
    async with serving(h) as port:
        cases = [
            (request(f"{PREFIX}/echo", b"x" * (MAX_BODY + 1)), 413, "request_too_large"),
            (
                f"POST {PREFIX}/echo HTTP/1.1\r\ntransfer-encoding: chunked\r\n\r\n".encode()
                + b"".join(b"%x\r\n%s\r\n" % (300, b"y" * 300) for _ in range(4)),
                413,
                "request_too_large",
            ),
            (request(f"{PREFIX}/fail"), 500, "internal_error"),
        ]
        for raw, want, code in cases:
            reader, writer = await asyncio.open_connection("127.0.0.1", port)
            writer.write(raw)
            status, headers, body = await read_response(reader)
            assert status == want and headers["content-type"] == "application/json", body
            assert json.loads(body)["error"]["code"] == code
            writer.close()
        # garbage after a good request: 400 JSON, closed
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(request(f"{PREFIX}/echo") + b"\x00\x01 not http\r\n\r\n")
        assert (await read_response(reader))[0] == 200
        status, headers, body = await read_response(reader)
        assert status == 400 and json.loads(body)["error"]["code"] == "invalid_http_request"
        assert await closed(reader)
        writer.close()


@on_both_loops
async def test_a_waiting_check_answers_later_and_pipelined_ones_in_order() -> None:
    h = Handler()
    async with serving(h) as port:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(request(f"{PREFIX}/wait", b"1") + request(f"{PREFIX}/echo", b"2"))
        await asyncio.wait_for(h.started.wait(), WAIT_S)
        h.release.set()
        first, second = await read_response(reader), await read_response(reader)
        assert (first[1]["x-echo"], second[1]["x-echo"]) == (":1", ":2")
        # an error after the wait is JSON too
        writer.write(request(f"{PREFIX}/wait/fail-late"))
        status, _, body = await read_response(reader)
        assert status == 500 and json.loads(body)["error"]["code"] == "internal_error"
        writer.close()


@on_both_loops
async def test_a_client_that_leaves_cancels_the_check() -> None:
    h = Handler()
    async with serving(h) as port:
        _, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(request(f"{PREFIX}/wait"))
        await asyncio.wait_for(h.started.wait(), WAIT_S)
        writer.close()
        await asyncio.wait_for(h.cancelled.wait(), WAIT_S)
    assert h.undelivered == []


@on_both_loops
async def test_an_answer_that_finds_the_client_gone_is_reported_undelivered() -> None:
    h = Handler(swallow_cancel=True)  # a check whose pick completed as the client left
    async with serving(h) as port:
        _, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(request(f"{PREFIX}/wait"))
        await asyncio.wait_for(h.started.wait(), WAIT_S)
        writer.close()
        await asyncio.wait_for(h.cancelled.wait(), WAIT_S)
        for _ in range(100):  # the task's done callback runs on a later loop iteration
            if h.undelivered:
                break
            await asyncio.sleep(0.01)
    assert h.undelivered == [f"{PREFIX}/wait"]


@on_both_loops
async def test_slow_headers_and_idle_connections_are_closed() -> None:
    h = Handler()
    async with serving(h, header_timeout_s=0.3, keep_alive_timeout_s=1) as port:
        # a first request whose headers never end: closed, though undecided
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(f"POST {PREFIX}/echo HTTP/1.1\r\nhost: t\r\n".encode())
        assert await closed(reader)
        writer.close()
        # a fast connection whose next request's headers stall
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(request(f"{PREFIX}/echo"))
        assert (await read_response(reader))[0] == 200
        writer.write(f"POST {PREFIX}/echo HTTP/1.1\r\n".encode())
        assert await closed(reader)
        writer.close()
        # an idle fast connection: closed after the keep-alive timeout
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(request(f"{PREFIX}/echo"))
        assert (await read_response(reader))[0] == 200
        assert await closed(reader)
        writer.close()


@on_both_loops
async def test_connections_over_the_cap_get_503_json() -> None:
    h = Handler()
    async with serving(h, max_connections=1) as port:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(request(f"{PREFIX}/echo"))
        assert (await read_response(reader))[0] == 200
        r2, w2 = await asyncio.open_connection("127.0.0.1", port)
        status, _, body = await read_response(r2)
        assert status == 503 and json.loads(body)["error"]["code"] == "too_many_connections"
        for w in (writer, w2):
            w.close()


@on_both_loops
async def test_stopping_closes_idle_connections_and_lets_a_check_finish() -> None:
    for busy in (False, True):
        await stop_with(busy)


async def stop_with(busy: bool) -> None:
    h = Handler()
    cfg = HttpServer()
    sock = listen_socket("127.0.0.1", 0)
    srv = EmbeddedServer(server_config(app, cfg, fast_route=(PREFIX, h, MAX_BODY)))
    port = await srv.start_on(sock)
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(request(f"{PREFIX}/echo"))
    assert (await read_response(reader))[0] == 200
    if busy:
        writer.write(request(f"{PREFIX}/wait", b"last"))
        await asyncio.wait_for(h.started.wait(), WAIT_S)
    stopping = asyncio.create_task(srv.stop(log, 5))
    if busy:
        for _ in range(200):  # until the server stopped listening (it tells its connections then)
            try:
                _, w = await asyncio.open_connection("127.0.0.1", port)
            except OSError:
                break
            w.close()
            await asyncio.sleep(0.02)
        h.release.set()
        status, headers, _ = await read_response(reader)
        assert status == 200 and headers["connection"] == "close"
    assert await closed(reader)
    await asyncio.wait_for(stopping, WAIT_S)
    writer.close()
