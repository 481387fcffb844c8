"""`Response.relay` (common/upstream/connection.py): body chunks go to the sink from the read callback
while it takes them, in one write per read; a refused chunk falls back to `put` in order; the idle
bound counts from the latest chunk; an upstream break and a failing sink surface as themselves."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from dataclasses import dataclass, field

import pytest

from common.upstream import Response, UpstreamClosed, UpstreamPools, UpstreamProtocolError, UpstreamTimeout

HEAD = b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n"
END = b"0\r\n\r\n"
WAIT_S = 10.0  # the bound on every wait for a condition below


def chunk(data: bytes) -> bytes:
    return b"%x\r\n%s\r\n" % (len(data), data)


@dataclass
class Server:
    port: int
    parts: asyncio.Queue[bytes | None]  # what the server writes next, one write each; None closes


@pytest.fixture
async def server() -> AsyncIterator[Server]:
    """A server answering one chunked stream with the writes the test hands it."""
    parts: asyncio.Queue[bytes | None] = asyncio.Queue()

    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.readuntil(b"\r\n\r\n")
        await reader.readexactly(2)
        writer.write(HEAD)
        while (part := await parts.get()) is not None:
            writer.write(part)
            await writer.drain()
        writer.close()

    srv = await asyncio.start_server(serve, "127.0.0.1", 0)
    yield Server(srv.sockets[0].getsockname()[1], parts)
    await parts.put(None)
    srv.close()


@dataclass
class Sink:
    """Records each write and whether it was pushed from the read callback (no task) or put."""

    refuse: set[int] = field(default_factory=set)  # push numbers (from 0) to refuse
    refuse_all: bool = False
    push_raises: bool = False
    writes: list[tuple[str, bytes]] = field(default_factory=list)
    pushes: int = 0
    in_task: list[bool] = field(default_factory=list)
    wrote: asyncio.Event = field(default_factory=asyncio.Event)

    def push(self, data: bytes) -> bool:
        n = self.pushes
        self.pushes += 1
        self.in_task.append(asyncio.current_task() is not None)
        if self.push_raises:
            raise RuntimeError("sink broke")
        if self.refuse_all or n in self.refuse:
            return False
        self.writes.append(("push", data))
        self.wrote.set()
        return True

    async def put(self, data: bytes) -> None:
        if self.push_raises:
            raise RuntimeError("sink broke")
        self.writes.append(("put", data))
        self.wrote.set()

    def body(self) -> bytes:
        return b"".join(d for _, d in self.writes)

    async def next_write(self) -> None:
        await asyncio.wait_for(self.wrote.wait(), WAIT_S)
        self.wrote.clear()


async def open_stream(server: Server) -> tuple[UpstreamPools, Response]:
    pools = UpstreamPools()
    resp = await pools.get("127.0.0.1", server.port).request(b"POST", b"/x", [], b"{}", head_timeout_s=WAIT_S)
    return pools, resp


async def test_chunks_are_pushed_from_the_read_callback_one_write_per_read(server: Server) -> None:
    pools, resp = await open_stream(server)
    sink = Sink()
    relay = asyncio.ensure_future(resp.relay(sink, WAIT_S))
    await server.parts.put(chunk(b"a"))
    await sink.next_write()
    await server.parts.put(chunk(b"b") + chunk(b"c") + chunk(b"d"))  # three chunks, one read
    await sink.next_write()
    await server.parts.put(END)
    await asyncio.wait_for(relay, WAIT_S)
    assert sink.writes == [("push", b"a"), ("push", b"bcd")]
    assert sink.in_task == [False, False]  # from the protocol callback, not a woken task
    pools.close()


async def test_a_refused_chunk_goes_through_put_and_order_is_kept(server: Server) -> None:
    pools, resp = await open_stream(server)
    sink = Sink(refuse={1})
    relay = asyncio.ensure_future(resp.relay(sink, WAIT_S))
    for part in (b"one,", b"two,", b"three,", b"four"):
        await server.parts.put(chunk(part))
        await sink.next_write()
    await server.parts.put(END)
    await asyncio.wait_for(relay, WAIT_S)
    assert sink.body() == b"one,two,three,four"
    assert [how for how, _ in sink.writes] == ["push", "put", "push", "push"]  # pushes resume after
    pools.close()


async def test_the_idle_bound_counts_from_the_latest_pushed_chunk(server: Server) -> None:
    pools, resp = await open_stream(server)
    sink = Sink()
    idle_s = 1.5  # a full second of slack per gap for a loaded machine
    relay = asyncio.ensure_future(resp.relay(sink, idle_s))
    loop = asyncio.get_running_loop()
    start = loop.time()
    for i in range(4):  # 4 gaps of a third of the bound: the stream outlasts one bound
        await asyncio.sleep(idle_s / 3)
        await server.parts.put(chunk(b"%d" % i))
        await sink.next_write()
    assert not relay.done()
    assert loop.time() - start > idle_s
    with pytest.raises(UpstreamTimeout) as err:  # then nothing: the bound ends it
        await asyncio.wait_for(relay, WAIT_S)
    assert err.value.phase == "idle"
    assert sink.body() == b"0123"
    pools.close()


async def test_bytes_queued_before_an_upstream_error_still_reach_the_client(server: Server) -> None:
    pools, resp = await open_stream(server)
    sink = Sink(refuse_all=True)  # the client is slow: every chunk waits in the queue
    relay = asyncio.ensure_future(resp.relay(sink, WAIT_S))
    await server.parts.put(chunk(b"good") + b"zz\r\nbad framing")  # one read: a chunk, then garbage
    with pytest.raises(UpstreamProtocolError):
        await asyncio.wait_for(relay, WAIT_S)
    assert sink.writes == [("put", b"good")]
    pools.close()


async def test_an_upstream_that_closes_mid_body_fails_the_relay(server: Server) -> None:
    pools, resp = await open_stream(server)
    sink = Sink()
    relay = asyncio.ensure_future(resp.relay(sink, WAIT_S))
    await server.parts.put(chunk(b"partial"))
    await sink.next_write()
    await server.parts.put(None)
    with pytest.raises(UpstreamClosed):
        await asyncio.wait_for(relay, WAIT_S)
    assert sink.body() == b"partial"
    pools.close()


async def test_a_failing_sink_is_the_sinks_error_not_the_upstreams(server: Server) -> None:
    pools, resp = await open_stream(server)
    sink = Sink(push_raises=True)
    relay = asyncio.ensure_future(resp.relay(sink, WAIT_S))
    await server.parts.put(chunk(b"x"))
    with pytest.raises(RuntimeError, match="sink broke"):
        await asyncio.wait_for(relay, WAIT_S)
    pools.close()
