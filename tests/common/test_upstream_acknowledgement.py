"""The upstream client's ack: interim 1xx responses acknowledge a request without ending it, and
`ack_timeout_s` bounds the wait for one (common/upstream)."""

from __future__ import annotations

import asyncio
import socket
import threading
import time
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager

import pytest

from common.upstream import UpstreamPools, UpstreamTimeout
from common.upstream.pool import HostPool
from tests.eventually import eventually

FINAL = b"HTTP/1.1 200 OK\r\ncontent-type: text/plain\r\ncontent-length: 2\r\n\r\nok"


async def read_request(reader: asyncio.StreamReader) -> bytes:
    """The next request's head, its body read past (content-length framing)."""
    head = await reader.readuntil(b"\r\n\r\n")
    length = next(
        (
            int(v)
            for k, _, v in (ln.partition(b": ") for ln in head.split(b"\r\n"))
            if k.lower() == b"content-length"
        ),
        0,
    )
    await reader.readexactly(length)
    return head


@asynccontextmanager
async def raw_server(answer: Callable[[int], list[bytes]]) -> AsyncIterator[tuple[int, list[bytes]]]:
    """A server that, for the n-th request head on a connection, writes `answer(n)` (each part a write)."""
    heads: list[bytes] = []
    writers: list[asyncio.StreamWriter] = []

    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        writers.append(writer)
        try:
            while head := await read_request(reader):
                heads.append(head)
                for part in answer(len(heads)):
                    writer.write(part)
                    await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        writer.close()

    server = await asyncio.start_server(serve, "127.0.0.1", 0)
    try:
        yield server.sockets[0].getsockname()[1], heads
    finally:
        for w in writers:
            w.transport.abort()
        server.close()
        await server.wait_closed()


async def test_interim_responses_acknowledge_and_the_final_one_is_the_answer() -> None:
    interim = [b"HTTP/1.1 100 Continue\r\n\r\n", b"HTTP/1.1 103 Early Hints\r\nlink: </a>\r\n\r\n"]
    async with raw_server(lambda n: [interim[n - 1], FINAL]) as (port, heads):
        pools = UpstreamPools()
        pool = pools.get("127.0.0.1", port)
        for _ in range(2):  # the second request reuses the connection: the 1xx left no state behind
            resp = await pool.request(b"POST", b"/x", [], b"{}", ack_timeout_s=1.0, head_timeout_s=5.0)
            assert resp.status == 200 and resp.header(b"link") is None
            assert await resp.read(5.0) == b"ok"
            resp.release()
        assert pool.open == 1 and len(heads) == 2
        assert all(b"expect: 100-continue\r\n" in h for h in heads)
        pools.close()


async def test_no_acknowledgement_within_the_deadline_is_an_unanswered_timeout() -> None:
    async with raw_server(lambda n: []) as (port, _heads):  # reads the request, never answers
        pools = UpstreamPools()
        with pytest.raises(UpstreamTimeout) as ei:
            await pools.get("127.0.0.1", port).request(
                b"POST", b"/x", [], b"{}", ack_timeout_s=0.1, head_timeout_s=60.0
            )
        assert ei.value.phase == "ack" and not ei.value.answered  # safe to send elsewhere
        assert "no acknowledgement" in str(ei.value)
        pools.close()


async def test_a_final_answer_without_an_interim_one_is_an_acknowledgement_too() -> None:
    async with raw_server(lambda n: [FINAL]) as (port, _heads):
        pools = UpstreamPools()
        resp = await pools.get("127.0.0.1", port).request(b"POST", b"/x", [], b"", ack_timeout_s=1.0)
        assert resp.status == 200 and await resp.read(5.0) == b"ok"
        resp.release()
        pools.close()


async def test_time_the_loop_was_too_busy_to_look_does_not_count_against_the_ack() -> None:
    # This loop is hogged (a blocking sleep: the lag under test, not a synchronisation) for 3x the
    # ack deadline; the server, on its own thread, acknowledges only once the hog is over. The
    # deadline's timer then fires ~0.2 s late: that lateness is given back, and the ack arrives in it.
    got_request, hog_over = threading.Event(), threading.Event()
    listener = socket.create_server(("127.0.0.1", 0))
    port = listener.getsockname()[1]

    def serve() -> None:
        conn, _ = listener.accept()
        with conn:
            data = b""
            while not data.endswith(b"{}"):
                data += conn.recv(65536)
            got_request.set()
            hog_over.wait(5.0)
            conn.sendall(b"HTTP/1.1 100 Continue\r\n\r\n" + FINAL)

    server = threading.Thread(target=serve, daemon=True)
    server.start()
    pools = UpstreamPools()
    try:
        sent = asyncio.create_task(
            pools.get("127.0.0.1", port).request(
                b"POST", b"/x", [], b"{}", ack_timeout_s=0.1, head_timeout_s=5.0
            )
        )
        await eventually(got_request.is_set, what="the request reached the server")
        time.sleep(0.3)  # noqa: ASYNC251  (the hog under test: this loop too busy to look)
        hog_over.set()
        resp = await sent
        assert resp.status == 200
        resp.release()
    finally:
        pools.close()
        listener.close()
        server.join(5.0)


@asynccontextmanager
async def busy_host(ack_slow: asyncio.Event) -> AsyncIterator[int]:
    """`/slow` is acknowledged (and answered) only once `ack_slow` is set; `/fast` at once."""

    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while head := await read_request(reader):
                if head.startswith(b"POST /slow"):
                    await ack_slow.wait()
                writer.write(FINAL)
                await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        writer.close()

    server = await asyncio.start_server(serve, "127.0.0.1", 0)
    try:
        yield server.sockets[0].getsockname()[1]
    finally:
        server.close()


@asynccontextmanager
async def kept_busy(ack_slow: asyncio.Event) -> AsyncIterator[HostPool]:
    """A pool to `busy_host`, sending it `/fast` requests back to back (on other connections of
    the same host) for as long as the block runs."""
    stop = asyncio.Event()

    async def keep_busy(pool: HostPool) -> None:
        while not stop.is_set():
            resp = await pool.request(b"POST", b"/fast", [], b"{}", ack_timeout_s=5.0, head_timeout_s=5.0)
            await resp.read(5.0)
            resp.release()

    async with busy_host(ack_slow) as port:
        pools = UpstreamPools()
        pool = pools.get("127.0.0.1", port)
        busy = asyncio.create_task(keep_busy(pool))
        try:
            yield pool
        finally:
            stop.set()
            await busy
            pools.close()


async def test_a_host_answering_other_requests_gets_more_time_to_acknowledge() -> None:
    wait_s = 0.3
    ack_slow = asyncio.Event()
    async with kept_busy(ack_slow) as pool:
        t0 = asyncio.get_running_loop().time()
        slow = asyncio.create_task(
            pool.request(b"POST", b"/slow", [], b"{}", ack_timeout_s=wait_s, head_timeout_s=10.0)
        )
        # past two deadlines, inside the renewals (1 + ACK_BUSY_ALLOWANCE deadlines in all)
        await eventually(lambda: asyncio.get_running_loop().time() - t0 > 2.5 * wait_s, what="2.5 deadlines")
        assert not slow.done()
        ack_slow.set()
        resp = await slow
        assert resp.status == 200
        resp.release()


async def test_a_request_never_acknowledged_by_a_busy_host_still_fails_in_the_end() -> None:
    """One stuck connection (say a hung worker process) among answering ones: renewed, then failed."""
    wait_s = 0.2
    async with kept_busy(asyncio.Event()) as pool:  # /slow is never acknowledged
        t0 = asyncio.get_running_loop().time()
        with pytest.raises(UpstreamTimeout) as ei:
            await pool.request(b"POST", b"/slow", [], b"{}", ack_timeout_s=wait_s, head_timeout_s=10.0)
        assert ei.value.phase == "ack" and not ei.value.answered
        assert asyncio.get_running_loop().time() - t0 >= 2 * wait_s  # renewed at least once
