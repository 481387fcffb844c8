"""The scraper's lean HTTP client reads every framing a pod may use, against real loopback sockets."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager

import pytest

from cluster_gateway.metrics.http_get import HttpGetError, PodConnection

Handler = Callable[[asyncio.StreamReader, asyncio.StreamWriter], Awaitable[None]]


@asynccontextmanager
async def serve(handler: Handler) -> AsyncIterator[int]:
    async def guarded(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            await handler(reader, writer)
        except asyncio.CancelledError:  # the test ended while this connection was still open
            writer.close()

    server = await asyncio.start_server(guarded, "127.0.0.1", 0)
    try:
        yield server.sockets[0].getsockname()[1]
    finally:
        server.close()
        await server.wait_closed()


async def _read_request(reader: asyncio.StreamReader) -> bytes:
    return await reader.readuntil(b"\r\n\r\n")


def _responder(responses: list[bytes], close_after: int | None = None) -> tuple[Handler, list[bytes]]:
    """Answers requests on one connection with `responses` in turn; records the requests."""
    seen: list[bytes] = []

    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            for i, response in enumerate(responses):
                seen.append(await _read_request(reader))
                writer.write(response)
                await writer.drain()
                if close_after is not None and i + 1 >= close_after:
                    break
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            writer.close()

    return handler, seen


async def test_content_length_bodies_reuse_one_connection() -> None:
    ok = b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: 5\r\n\r\nhello"
    handler, seen = _responder([ok, ok, ok])
    async with serve(handler) as port:
        conn = PodConnection("127.0.0.1", port)
        for _ in range(3):
            assert await conn.get("/metrics", 1024) == (200, b"hello")
        conn.close()
    assert len(seen) == 3  # all on the first connection
    assert seen[0].startswith(b"GET /metrics HTTP/1.1\r\n") and b"Accept-Encoding: identity" in seen[0]


async def test_chunked_bodies_with_extensions_and_trailers() -> None:
    chunked = (
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"
        b"4;ext=1\r\nvllm\r\n7\r\n:metric\r\n0\r\nX-Trailer: yes\r\n\r\n"
    )
    handler, _ = _responder([chunked, chunked])
    async with serve(handler) as port:
        conn = PodConnection("127.0.0.1", port)
        assert await conn.get("/metrics", 1024) == (200, b"vllm:metric")
        assert await conn.get("/metrics", 1024) == (200, b"vllm:metric")
        conn.close()


async def test_unframed_http10_body_runs_to_connection_close() -> None:
    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await _read_request(reader)
        writer.write(b"HTTP/1.0 200 OK\r\nContent-Type: text/plain\r\n\r\n" + b"x" * 100_000)
        await writer.drain()
        writer.close()

    async with serve(handler) as port:
        conn = PodConnection("127.0.0.1", port)
        status, body = await conn.get("/metrics", 1_000_000)
        assert status == 200 and body == b"x" * 100_000
        # The server closed: the next request opens a new connection.
        status, body = await conn.get("/metrics", 1_000_000)
        assert len(body) == 100_000


async def test_a_keepalive_connection_closed_while_idle_is_retried_once() -> None:
    ok = b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok"
    handler, seen = _responder([ok], close_after=1)  # server drops the connection after 1 answer
    async with serve(handler) as port:
        conn = PodConnection("127.0.0.1", port)
        assert await conn.get("/a", 100) == (200, b"ok")
        await asyncio.sleep(0.05)
        assert await conn.get("/b", 100) == (200, b"ok")
        conn.close()
    assert len(seen) == 2


async def test_error_statuses_connection_close_and_limits() -> None:
    not_found = b"HTTP/1.1 404 Not Found\r\nContent-Length: 3\r\nConnection: close\r\n\r\nnop"
    handler, _ = _responder([not_found])
    async with serve(handler) as port:
        conn = PodConnection("127.0.0.1", port)
        assert await conn.get("/v1/models", 100) == (404, b"nop")

    big = b"HTTP/1.1 200 OK\r\nContent-Length: 5000\r\n\r\n" + b"y" * 5000
    handler, _ = _responder([big])
    async with serve(handler) as port:
        with pytest.raises(HttpGetError, match="exceeds"):
            await PodConnection("127.0.0.1", port).get("/metrics", 1000)


@pytest.mark.parametrize(
    "response",
    [
        b"SSH-2.0-OpenSSH_9.6\r\n\r\n",
        b"HTTP/1.1 abc OK\r\n\r\n",
        b"HTTP/1.1 200 OK\r\nContent-Length: many\r\n\r\n",
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n",
    ],
)
async def test_garbage_responses_are_protocol_errors(response: bytes) -> None:
    handler, _ = _responder([response])
    async with serve(handler) as port:
        with pytest.raises(HttpGetError):
            await PodConnection("127.0.0.1", port).get("/metrics", 1000)


async def test_refused_connections_raise_connection_error() -> None:
    async with serve(_responder([])[0]) as port:
        pass  # closed again: nothing listens on `port` now
    with pytest.raises(ConnectionError, match="cannot connect"):
        await PodConnection("127.0.0.1", port).get("/metrics", 100)


async def test_cancellation_mid_response_closes_the_connection() -> None:
    release = asyncio.Event()

    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await _read_request(reader)
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nhalf")
        await release.wait()
        writer.close()

    async with serve(handler) as port:
        conn = PodConnection("127.0.0.1", port)
        with pytest.raises(TimeoutError):
            async with asyncio.timeout(0.2):
                await conn.get("/metrics", 100)
        assert not conn.connected  # a half-read response never poisons the next request
        release.set()
