"""The WAN relay on loopback: latency is paid each way, partitions drop bytes (one way or both),
refused targets and `loss` reset the client, a balancer fails over, the control socket drives it."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from common.wanrelay import ControlClient, Impairment, Link
from common.wanrelay.control import Relays, serve_control

pytestmark = pytest.mark.timeout(30)


async def _echo_server() -> tuple[asyncio.Server, str]:
    async def echo(r: asyncio.StreamReader, w: asyncio.StreamWriter) -> None:
        while data := await r.read(1024):
            w.write(data)
            await w.drain()
        w.close()

    srv = await asyncio.start_server(echo, "127.0.0.1", 0)
    return srv, f"127.0.0.1:{srv.sockets[0].getsockname()[1]}"


@pytest.fixture
async def echo() -> AsyncIterator[str]:
    srv, addr = await _echo_server()
    yield addr
    srv.close()


async def _open(link: Link) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    host, port = link.bound.rsplit(":", 1)
    return await asyncio.open_connection(host, int(port))


async def _ended(r: asyncio.StreamReader) -> bool:
    """The connection ended: a clean EOF or, as the relay sends on purpose, a reset."""
    try:
        return await asyncio.wait_for(r.read(1), 5) == b""
    except ConnectionResetError:
        return True


async def test_latency_is_paid_each_way(echo: str) -> None:
    link = Link("l", "127.0.0.1:0", [echo], impairment=Impairment(latency_ms=50))
    await link.start()
    try:
        r, w = await _open(link)
        t0 = time.monotonic()
        w.write(b"ping")
        assert await asyncio.wait_for(r.readexactly(4), 5) == b"ping"
        # handshake round trip + one way there + one way back: at least 4 x 50 ms
        assert time.monotonic() - t0 >= 0.2
        t1 = time.monotonic()
        w.write(b"pong")
        assert await asyncio.wait_for(r.readexactly(4), 5) == b"pong"
        assert time.monotonic() - t1 >= 0.1
        w.close()
    finally:
        await link.stop()


async def test_one_way_partition_drops_only_one_direction(echo: str) -> None:
    link = Link("l", "127.0.0.1:0", [echo])
    await link.start()
    try:
        r, w = await _open(link)
        w.write(b"a")
        assert await asyncio.wait_for(r.readexactly(1), 5) == b"a"
        link.configure(partition="backward")  # replies are lost, requests still arrive
        w.write(b"b")
        with pytest.raises(TimeoutError):
            await asyncio.wait_for(r.readexactly(1), 0.3)
        assert link.stats.dropped_bytes == 1
        link.configure(partition="forward")
        w.write(b"c")
        with pytest.raises(TimeoutError):
            await asyncio.wait_for(r.readexactly(1), 0.3)
        link.configure(partition="none")
        w.write(b"d")
        assert await asyncio.wait_for(r.readexactly(1), 5) == b"d"
        w.close()
    finally:
        await link.stop()


async def test_full_partition_black_holes_new_connections(echo: str) -> None:
    link = Link("l", "127.0.0.1:0", [echo], impairment=Impairment(partition="full"))
    await link.start()
    try:
        r, w = await _open(link)
        w.write(b"hello")
        with pytest.raises(TimeoutError):
            await asyncio.wait_for(r.read(1), 0.3)
        assert link.stats.blackholed == 1
        assert link.reset() == 1
        assert await _ended(r)  # the reset ends it
    finally:
        await link.stop()


async def test_refused_target_resets_and_balancer_fails_over(echo: str) -> None:
    dead_srv, dead = await _echo_server()
    dead_srv.close()
    await dead_srv.wait_closed()
    link = Link("l", "127.0.0.1:0", [dead])
    await link.start()
    try:
        r, w = await _open(link)
        w.write(b"x")
        assert await _ended(r)
        assert link.stats.refused == 1
        link.set_targets([dead, echo])  # in-order failover skips the refusing target
        r, w = await _open(link)
        w.write(b"y")
        assert await asyncio.wait_for(r.readexactly(1), 5) == b"y"
        assert link.stats.by_target == {echo: 1}
        w.close()
    finally:
        await link.stop()


async def test_loss_resets_new_connections(echo: str) -> None:
    link = Link("l", "127.0.0.1:0", [echo], impairment=Impairment(loss=1.0))
    await link.start()
    try:
        r, w = await _open(link)
        w.write(b"x")
        assert await _ended(r)
        assert link.stats.lost == 1
    finally:
        await link.stop()


async def test_control_socket_drives_links(echo: str, tmp_path: Path) -> None:
    relays = Relays()
    path = str(tmp_path / "c.sock")
    server = await serve_control(relays, path)
    client = ControlClient(path)
    try:
        added = await asyncio.to_thread(client.call, "add", name="l", listen="127.0.0.1:0", targets=[echo])
        assert added["listen"].startswith("127.0.0.1:")
        got = await asyncio.to_thread(client.call, "set", name="l", latency_ms=5, partition="forward")
        assert got["impairment"]["partition"] == "forward"
        with pytest.raises(RuntimeError, match="partition must be"):
            await asyncio.to_thread(client.call, "set", name="l", partition="sideways")
        with pytest.raises(RuntimeError, match="no link named"):
            await asyncio.to_thread(client.call, "reset", name="nope")
        stats = await asyncio.to_thread(client.call, "stats")
        assert stats["links"]["l"]["accepted"] == 0
    finally:
        server.close()
        await relays.close()


async def test_unix_listener_and_unix_target(echo: str, tmp_path: Path) -> None:
    inner = Link("inner", f"unix:{tmp_path / 'in.sock'}", [echo])
    await inner.start()
    outer = Link("outer", "127.0.0.1:0", [f"unix:{tmp_path / 'in.sock'}"])
    await outer.start()
    try:
        r, w = await _open(outer)
        w.write(b"z")
        assert await asyncio.wait_for(r.readexactly(1), 5) == b"z"
        assert outer.targets == [f"unix:{tmp_path / 'in.sock'}"]
        w.close()
    finally:
        await outer.stop()
        await inner.stop()
