"""A loopback TCP relay that injects control-plane faults: added latency, a partition, an outage.

It sits between a client and a server (the router's replicas and redis-server; the cluster agents
and the router's capacity port) and runs on its own thread and event loop, so a bench whose main
thread blocks on subprocess pipes still relays. Modes:
  * `up` — bytes flow, each direction delayed by `delay_s / 2` (so a round trip gains `delay_s`);
    data is queued with its due time and written in order, so latency does not cap throughput;
  * `partition` — connections stay open (and new ones are accepted) but nothing flows: a network
    partition, which the peers only notice by their own timeouts;
  * `down` — every connection is reset and new ones are closed at once: the server is gone.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
import threading
import time
from collections import deque
from typing import Literal

Mode = Literal["up", "partition", "down"]


class TcpRelay:
    def __init__(self, target_port: int, target_host: str = "127.0.0.1") -> None:
        self.target = (target_host, target_port)
        self.delay_s = 0.0
        self.mode: Mode = "up"
        self.connections_accepted = 0
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="tcp-relay", daemon=True)
        self._server: asyncio.Server | None = None
        self._writers: set[asyncio.StreamWriter] = set()
        self._changed: asyncio.Event | None = None
        self.port = 0

    # --- control (any thread) ----------------------------------------------------------------
    def start(self) -> int:
        self._thread.start()
        return asyncio.run_coroutine_threadsafe(self._start(), self._loop).result(10)

    def set(self, *, mode: Mode | None = None, delay_s: float | None = None) -> None:
        asyncio.run_coroutine_threadsafe(self._set(mode, delay_s), self._loop).result(10)

    def stop(self) -> None:
        with contextlib.suppress(Exception):
            asyncio.run_coroutine_threadsafe(self._stop(), self._loop).result(10)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)

    # --- relay loop --------------------------------------------------------------------------
    async def _start(self) -> int:
        self._changed = asyncio.Event()
        sock = socket.socket()
        sock.bind(("127.0.0.1", 0))
        self._server = await asyncio.start_server(self._accept, sock=sock)
        self.port = int(sock.getsockname()[1])
        return self.port

    async def _set(self, mode: Mode | None, delay_s: float | None) -> None:
        if delay_s is not None:
            self.delay_s = delay_s
        if mode is not None:
            self.mode = mode
            if mode == "down":
                for w in list(self._writers):
                    _reset(w)
                self._writers.clear()
        assert self._changed is not None
        self._changed.set()
        self._changed = asyncio.Event()

    async def _stop(self) -> None:
        if self._server is not None:
            self._server.close()
        for w in list(self._writers):
            _reset(w)

    async def _accept(self, cr: asyncio.StreamReader, cw: asyncio.StreamWriter) -> None:
        self.connections_accepted += 1
        if self.mode == "down":
            _reset(cw)
            return
        try:
            sr, sw = await asyncio.open_connection(*self.target)
        except OSError:
            _reset(cw)
            return
        self._writers |= {cw, sw}
        try:
            await asyncio.gather(self._pump(cr, sw), self._pump(sr, cw), return_exceptions=True)
        finally:
            for w in (cw, sw):
                self._writers.discard(w)
                _reset(w)

    async def _pump(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        queue: deque[tuple[float, bytes]] = deque()
        wake = asyncio.Event()
        done = False

        async def send() -> None:
            while not (done and not queue):
                if not queue:
                    wake.clear()
                    await wake.wait()
                    continue
                due, data = queue[0]
                while self.mode == "partition":  # hold everything until the partition heals
                    assert self._changed is not None
                    await self._changed.wait()
                wait = due - time.monotonic()
                if wait > 0:
                    await asyncio.sleep(wait)
                queue.popleft()
                writer.write(data)
                await writer.drain()

        sender = asyncio.create_task(send())
        try:
            while True:
                data = await reader.read(65536)
                if not data:
                    break
                queue.append((time.monotonic() + self.delay_s / 2, data))
                wake.set()
        finally:
            done = True
            wake.set()
            with contextlib.suppress(Exception):
                await sender
            with contextlib.suppress(Exception):
                writer.write_eof()


def _reset(w: asyncio.StreamWriter) -> None:
    """Close with RST (SO_LINGER 0), as a crashed peer's kernel would."""
    sock = w.get_extra_info("socket")
    if sock is not None:
        with contextlib.suppress(OSError):
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\x00\x00\x00\x00\x00\x00\x00")
    w.close()
