"""Each wait of the upstream client has its own deadline, though one lazy timer per connection
enforces them (common/upstream/connection.py `_wait`)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator

import pytest

from common.upstream import UpstreamPools, UpstreamTimeout

HEAD = b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n"


def chunk(data: bytes) -> bytes:
    return b"%x\r\n%s\r\n" % (len(data), data)


@pytest.fixture
async def drip() -> AsyncIterator[tuple[int, asyncio.Queue[bytes | None]]]:
    """A server answering one chunked stream whose chunks the test releases one by one."""
    release: asyncio.Queue[bytes | None] = asyncio.Queue()

    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.readuntil(b"\r\n\r\n")
        await reader.readexactly(2)
        writer.write(HEAD)
        while (part := await release.get()) is not None:
            writer.write(part)
            await writer.drain()
        writer.close()

    server = await asyncio.start_server(serve, "127.0.0.1", 0)
    yield server.sockets[0].getsockname()[1], release
    await release.put(None)  # ends a handler still waiting for a chunk
    server.close()


async def test_every_wait_gets_its_own_deadline(drip: tuple[int, asyncio.Queue[bytes | None]]) -> None:
    port, release = drip
    pools = UpstreamPools()
    resp = await pools.get("127.0.0.1", port).request(b"POST", b"/x", [], b"{}", head_timeout_s=10.0)

    async def produce() -> None:
        for i in range(10):
            await asyncio.sleep(0.3)
            await release.put(chunk(b"tok%d" % i))

    # 10 gaps of 0.3 s: 3 s in all, longer than the 2 s each wait may take; the reader is waiting
    # through each gap, so the timer armed by the first wait fires during a later one
    start = time.monotonic()
    producer = asyncio.create_task(produce())
    want = b"".join(b"tok%d" % i for i in range(10))
    got = b""
    while len(got) < len(want):  # a loaded loop may find two chunks queued at once
        got += await resp.next_chunk(2.0)
    await producer
    assert time.monotonic() - start > 2.0  # the stream as a whole outlasted one wait's bound
    assert got == want
    await release.put(b"0\r\n\r\n")
    assert await resp.next_chunk(2.0) == b""
    resp.release()
    pools.close()


async def test_a_stall_longer_than_the_wait_is_an_idle_timeout(
    drip: tuple[int, asyncio.Queue[bytes | None]],
) -> None:
    port, release = drip
    pools = UpstreamPools()
    resp = await pools.get("127.0.0.1", port).request(b"POST", b"/x", [], b"{}", head_timeout_s=10.0)
    await release.put(chunk(b"first"))
    assert await resp.next_chunk(30.0) == b"first"  # arms the connection's timer 30 s out
    start = time.monotonic()
    with pytest.raises(UpstreamTimeout) as ei:
        await resp.next_chunk(0.2)  # a shorter wait must not wait for that timer
    assert ei.value.phase == "idle"
    assert time.monotonic() - start < 10.0
    resp.release()
    pools.close()
