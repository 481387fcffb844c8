"""One WAN link: a TCP listener whose connections are relayed to a target with latency, jitter,
connection loss and (full or one-way) partitions, all changeable while connections are live.

Why a relay and not packet shaping: without `netem` the kernel cannot delay or drop packets, so the
link is made at the byte-stream level. What an application sees is kept faithful where it matters:
- latency: every chunk is delivered `latency_ms` (plus 0..`jitter_ms`) after it was read, in order;
  a new connection pays one round trip (the handshake) before its first byte is relayed;
- loss: TCP retransmits lost packets, so a client only ever sees loss as delay or, at worst, a
  broken connection; `loss` is the chance that a new connection is reset at once;
- partitions: `full` drops the bytes of live connections both ways and black-holes new ones
  (accepted, never answered, as when packets vanish); `forward` / `backward` drop only the bytes
  going to / coming from the target (a one-way partition: each side believes its writes went out);
- a target that refuses (or no target at all) resets the accepted connection, as a refused connect
  would have, so the caller's "connection failed" handling runs.
A target is host:port or unix:/path (a way out of a namespace, e.g. a host-side endpoint into the
bed). Several targets make the link an L4 load balancer: `first` (in-order failover, deterministic) or
`round_robin`.
"""

from __future__ import annotations

import asyncio
import contextlib
import random
import socket
import struct
import time
from dataclasses import asdict, dataclass, field
from typing import Literal, get_args

Partition = Literal["none", "full", "forward", "backward"]
Policy = Literal["first", "round_robin"]
Direction = Literal["forward", "backward"]  # forward: accepting side -> target


@dataclass
class Impairment:
    """How the link misbehaves now. Latency and jitter apply to each direction separately."""

    latency_ms: float = 0.0
    jitter_ms: float = 0.0
    loss: float = 0.0
    partition: Partition = "none"

    def validate(self) -> None:
        if self.latency_ms < 0 or self.jitter_ms < 0:
            raise ValueError("latency_ms and jitter_ms must be >= 0")
        if not 0.0 <= self.loss <= 1.0:
            raise ValueError("loss must be a probability in [0, 1]")
        if self.partition not in get_args(Partition):
            raise ValueError(f"partition must be one of {get_args(Partition)}, not {self.partition!r}")

    def blocks(self, direction: Direction) -> bool:
        return self.partition in ("full", direction)


@dataclass
class LinkStats:
    accepted: int = 0
    live: int = 0
    lost: int = 0  # reset at once by `loss`
    blackholed: int = 0  # accepted during a full partition
    refused: int = 0  # no target accepted the connection
    reset: int = 0  # aborted by a `reset` command
    forwarded_bytes: int = 0
    dropped_bytes: int = 0
    by_target: dict[str, int] = field(default_factory=dict)  # connections relayed to each target


def parse_address(addr: str) -> tuple[str, int]:
    host, sep, port = addr.rpartition(":")
    if not sep or not host or not port.isdigit():
        raise ValueError(f"address {addr!r} is not host:port")
    return host.strip("[]"), int(port)


def _target(addr: str) -> tuple[str, int]:
    """host:port, or ("unix:/path", 0) for a Unix socket target."""
    return (addr, 0) if addr.startswith("unix:") else parse_address(addr)


def _abort(writer: asyncio.StreamWriter) -> None:
    """Close with an RST (SO_LINGER 0), so the peer sees a reset rather than a clean end."""
    sock = writer.get_extra_info("socket")
    if sock is not None and sock.family in (socket.AF_INET, socket.AF_INET6):
        with contextlib.suppress(OSError):
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    writer.transport.abort()


class _Connection:
    """One relayed connection: two pumps (one per direction), each a reader and a paced sender."""

    def __init__(self, link: Link, down: asyncio.StreamWriter) -> None:
        self.link = link
        self.down = down
        self.up: asyncio.StreamWriter | None = None
        self.target = ""
        self.tasks: list[asyncio.Task[None]] = []
        self.done = asyncio.Event()

    def abort(self) -> None:
        for w in (self.down, self.up):
            if w is not None:
                _abort(w)
        self.done.set()

    async def pump(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, d: Direction) -> None:
        queue: asyncio.Queue[tuple[float, bytes | None]] = asyncio.Queue()
        sender = asyncio.create_task(self._send(queue, writer, d))
        last_due = 0.0
        try:
            while True:
                try:
                    data = await reader.read(65536)
                except OSError:  # the peer reset: pass the reset on
                    self.abort()
                    return
                imp = self.link.impairment
                if data and imp.blocks(d):
                    self.link.stats.dropped_bytes += len(data)
                    continue
                delay = imp.latency_ms + (self.link.rng.uniform(0, imp.jitter_ms) if imp.jitter_ms else 0.0)
                last_due = max(last_due, time.monotonic() + delay / 1000.0)  # jitter never reorders
                queue.put_nowait((last_due, data or None))
                if not data:
                    break
            await sender
        finally:
            if not sender.done():
                sender.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await sender

    async def _send(
        self, queue: asyncio.Queue[tuple[float, bytes | None]], writer: asyncio.StreamWriter, d: Direction
    ) -> None:
        while True:
            due, data = await queue.get()
            wait = due - time.monotonic()
            if wait > 0:
                await asyncio.sleep(wait)
            if data is None:  # the reader saw EOF: half-close this side too
                with contextlib.suppress(OSError):
                    if writer.can_write_eof():
                        writer.write_eof()
                return
            if self.link.impairment.blocks(d):  # partitioned while "in the air"
                self.link.stats.dropped_bytes += len(data)
                continue
            try:
                writer.write(data)
                await writer.drain()
            except OSError:
                self.abort()
                return
            self.link.stats.forwarded_bytes += len(data)


class Link:
    """A named relay from `listen` (host:port, or unix:/path for a client's way in) to `targets`."""

    def __init__(
        self,
        name: str,
        listen: str,
        targets: list[str],
        *,
        policy: Policy = "first",
        impairment: Impairment | None = None,
        connect_timeout_s: float = 2.0,
        rng: random.Random | None = None,
    ) -> None:
        if policy not in get_args(Policy):
            raise ValueError(f"policy must be one of {get_args(Policy)}, not {policy!r}")
        self.name = name
        self.listen = listen
        self.policy: Policy = policy
        self.impairment = impairment or Impairment()
        self.impairment.validate()
        self.connect_timeout_s = connect_timeout_s
        self.rng = rng or random.Random()
        self.stats = LinkStats()
        self.bound = ""
        self._targets = [_target(t) for t in targets]
        self._turn = 0
        self._server: asyncio.Server | None = None
        self._conns: set[_Connection] = set()
        self._idle = asyncio.Event()  # set while no connection is live
        self._idle.set()

    @property
    def targets(self) -> list[str]:
        return [t if not p else f"{t}:{p}" for t, p in self._targets]

    async def start(self) -> str:
        """Listen; returns the bound address (host:port with the real port, or unix:/path)."""
        if self.listen.startswith("unix:"):
            path = self.listen.removeprefix("unix:")
            self._server = await asyncio.start_unix_server(self._accept, path)
            self.bound = self.listen
        else:
            host, port = parse_address(self.listen)
            self._server = await asyncio.start_server(self._accept, host, port, reuse_address=True)
            self.bound = f"{host}:{self._server.sockets[0].getsockname()[1]}"
        return self.bound

    async def stop(self) -> None:
        if self._server is not None:
            self._server.close()
            self.reset()
            # let the aborted connections' tasks finish, so none is cancelled mid-pump at exit
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(2.0):
                    await self._idle.wait()
            await self._server.wait_closed()
            self._server = None

    def configure(self, **changes: object) -> Impairment:
        """Change some impairment fields (the others stay); applies to live connections at once."""
        unknown = set(changes) - set(asdict(self.impairment))
        if unknown:
            raise ValueError(f"unknown impairment field(s): {sorted(unknown)}")
        new = Impairment(**{**asdict(self.impairment), **changes})  # type: ignore[arg-type]
        new.validate()
        self.impairment = new
        return new

    def set_targets(self, targets: list[str]) -> None:
        """New connections go to these; live ones keep their target (a draining load balancer)."""
        self._targets = [_target(t) for t in targets]

    def reset(self) -> int:
        """Abort every live connection with an RST both ways; returns how many there were."""
        conns = list(self._conns)
        for c in conns:
            c.abort()
        self.stats.reset += len(conns)
        return len(conns)

    def _order(self) -> list[tuple[str, int]]:
        if self.policy == "first" or not self._targets:
            return list(self._targets)
        self._turn = (self._turn + 1) % len(self._targets)
        return self._targets[self._turn :] + self._targets[: self._turn]

    async def _connect(self) -> tuple[asyncio.StreamReader, asyncio.StreamWriter, str] | None:
        for host, port in self._order():
            try:
                async with asyncio.timeout(self.connect_timeout_s):
                    if port:
                        r, w = await asyncio.open_connection(host, port)
                    else:
                        r, w = await asyncio.open_unix_connection(host.removeprefix("unix:"))
            except (OSError, TimeoutError):
                continue
            return r, w, f"{host}:{port}" if port else host
        return None

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.stats.accepted += 1
        conn = _Connection(self, writer)
        imp = self.impairment
        if imp.loss and self.rng.random() < imp.loss:
            self.stats.lost += 1
            _abort(writer)
            return
        self._conns.add(conn)
        self._idle.clear()
        self.stats.live += 1
        try:
            if imp.partition == "full":
                self.stats.blackholed += 1
                await self._black_hole(reader, conn)
                return
            if imp.latency_ms:  # the handshake's round trip
                await asyncio.sleep(2 * imp.latency_ms / 1000.0)
            up = await self._connect()
            if up is None:
                self.stats.refused += 1
                _abort(writer)
                return
            up_reader, up_writer, conn.target = up
            conn.up = up_writer
            self.stats.by_target[conn.target] = self.stats.by_target.get(conn.target, 0) + 1
            await asyncio.gather(
                conn.pump(reader, up_writer, "forward"),
                conn.pump(up_reader, writer, "backward"),
            )
        finally:
            self._conns.discard(conn)
            if not self._conns:
                self._idle.set()
            self.stats.live -= 1
            for w in (writer, conn.up):
                if w is not None and not w.is_closing():
                    w.close()

    async def _black_hole(self, reader: asyncio.StreamReader, conn: _Connection) -> None:
        """Swallow what the client sends until it gives up (or a reset aborts it)."""
        while not conn.done.is_set():
            try:
                data = await reader.read(65536)
            except OSError:
                return
            if not data:
                return
            self.stats.dropped_bytes += len(data)
