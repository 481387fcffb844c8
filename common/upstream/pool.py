"""Keep-alive connection pools toward upstreams (pods, or cluster gateways), O(1) per request.

Each upstream `host:port` has a `HostPool`: a LIFO deque of idle connections (the most recently
used first, so the rest age out together and expire from the cold end), a count against the
per-upstream cap, and a FIFO of requests waiting for a slot. Taking or returning a connection
never scans the pool — the property httpx lacks (see `connection.py`).

Idle connections expire after `idle_expiry_s`, shorter than the servers' own keep-alive timeouts
(uvicorn, which vLLM and SGLang run on, closes idle connections after 5 s), so a request rarely
meets a connection the server is just closing; when it does (a reused connection closes before
any response byte) the request is sent once more on a fresh connection — the server never read it.
"""

from __future__ import annotations

import asyncio
import contextlib
import ssl
import time
from collections import deque
from collections.abc import Iterable

from common.upstream.connection import Connection, Response
from common.upstream.errors import ConnectFailed, PoolTimeout, UpstreamClosed


def _expire(fut: asyncio.Future[Connection | None]) -> None:
    if not fut.done():
        fut.set_exception(PoolTimeout("no free connection slot in time"))


class HostPool:
    """Connections to one `host:port`."""

    def __init__(
        self,
        host: str,
        port: int,
        *,
        max_connections: int = 1024,
        connect_timeout_s: float = 2.0,
        idle_expiry_s: float = 4.0,
        ssl_context: ssl.SSLContext | None = None,
        max_connecting: int = 64,
        wait_timeout_s: float = 30.0,
    ) -> None:
        self.host = host
        # at most this many connects at once: a burst of 2,000 new streams otherwise sends 2,000
        # SYNs at one pod's accept loop and the late ones time out; the rest wait (≤ wait_timeout_s)
        # for a connection returned or a connect turn
        self.max_connecting = max_connecting
        self.wait_timeout_s = wait_timeout_s
        self._connecting = 0
        self.ssl_context = ssl_context
        self.port = port
        self.max_connections = max_connections
        self.connect_timeout_s = connect_timeout_s
        self.idle_expiry_s = idle_expiry_s
        self._host_header = f"{host}:{port}".encode("latin-1")
        self.heard = 0  # data_received calls on this host's connections: its sign of life (read_ack)
        self._idle: deque[Connection] = deque()
        # a waiter gets an idle connection, or None: "a slot is yours, connect in it"
        self._waiters: deque[asyncio.Future[Connection | None]] = deque()
        self.open = 0  # connections counted against the cap (idle + busy + connecting)
        self.closed = False

    # --- request ---------------------------------------------------------------
    def build_head(
        self, method: bytes, target: bytes, headers: Iterable[tuple[bytes, bytes]], n: int
    ) -> bytes:
        parts = [method, b" ", target, b" HTTP/1.1\r\nhost: ", self._host_header, b"\r\n"]
        for k, v in headers:
            parts += (k, b": ", v, b"\r\n")
        parts += (b"content-length: ", str(n).encode(), b"\r\n\r\n")
        return b"".join(parts)

    async def request(
        self,
        method: bytes,
        target: bytes,
        headers: Iterable[tuple[bytes, bytes]],
        body: bytes = b"",
        *,
        head_timeout_s: float | None = None,
        ack_timeout_s: float | None = None,
    ) -> Response:
        """Send a request; return once the response head arrived. Raises `UpstreamError`s.

        `headers` must not include `host` or `content-length` (this pool writes both).
        `ack_timeout_s`: the request carries `expect: 100-continue` (its body still goes out at once,
        as RFC 9110 §10.1.1 allows, so no round trip is added) and the server must acknowledge it —
        an interim 100, or the final head — within this long after it was sent, else
        `UpstreamTimeout("ack")`: a path that accepts connections but answers nothing is found in
        seconds, while `head_timeout_s` still gives a slow answer all the time it needs.
        """
        if ack_timeout_s is not None:
            headers = [*headers, (b"expect", b"100-continue")]
        head = self.build_head(method, target, headers, len(body))
        for attempt in (0, 1):
            conn = await self._take()
            reused = conn.requests > 0
            try:
                conn.send(head, body)
                if ack_timeout_s is not None:
                    await conn.read_ack(ack_timeout_s)
                await conn.read_head(head_timeout_s)
            except UpstreamClosed as exc:
                conn.abort()
                self.give_back(conn)
                if reused and not exc.answered and attempt == 0:
                    continue  # a keep-alive connection the server closed while idle
                raise
            except BaseException:
                conn.abort()
                self.give_back(conn)
                raise
            return Response(conn)
        raise AssertionError("unreachable")

    # --- slots ------------------------------------------------------------------
    async def _take(self) -> Connection:
        idle = self._idle
        while idle:
            conn = idle.pop()
            if conn.closed:
                continue
            if time.monotonic() - conn.idle_since > self.idle_expiry_s:
                # LIFO: everything older than this one has expired too
                self._close_idle(conn)
                while idle:
                    self._close_idle(idle.popleft())
                break
            return conn
        if self.open < self.max_connections and self._connecting < self.max_connecting:
            self.open += 1
            return await self._connect_in_slot()
        loop = asyncio.get_running_loop()
        fut: asyncio.Future[Connection | None] = loop.create_future()
        self._waiters.append(fut)
        timer = loop.call_later(self.wait_timeout_s, _expire, fut)
        try:
            handed_conn = await fut
        except BaseException:
            if fut.done() and not fut.cancelled() and fut.exception() is None:
                handed = fut.result()  # handed over just as we were cancelled: pass it on
                if handed is None:
                    self.open -= 1
                    self._connecting -= 1
                    self._hand_slot()
                else:
                    self.give_back(handed)
            raise
        finally:
            timer.cancel()
            with contextlib.suppress(ValueError):
                self._waiters.remove(fut)
        if handed_conn is None:  # a slot to connect in (counted by _hand_slot)
            self._connecting -= 1
            return await self._connect_in_slot()
        return handed_conn

    async def _connect_in_slot(self) -> Connection:
        """Connect within a slot already counted in `open`; frees it again on failure."""
        self._connecting += 1
        try:
            return await self._connect()
        except BaseException:
            self.open -= 1
            raise
        finally:
            self._connecting -= 1
            self._hand_slot()

    async def _connect(self) -> Connection:
        loop = asyncio.get_running_loop()
        try:
            async with asyncio.timeout(self.connect_timeout_s):
                _, conn = await loop.create_connection(
                    lambda: Connection(self),
                    self.host,
                    self.port,
                    ssl=self.ssl_context,
                    server_hostname=self.host if self.ssl_context is not None else None,
                )
        except TimeoutError:
            raise ConnectFailed(f"connect to {self.host}:{self.port} timed out") from None
        except ssl.SSLError as exc:
            raise ConnectFailed(f"TLS handshake with {self.host}:{self.port} failed: {exc}") from None
        except OSError as exc:
            raise ConnectFailed(f"cannot connect to {self.host}:{self.port}: {exc.strerror or exc}") from None
        return conn

    def give_back(self, conn: Connection) -> None:
        """A request on `conn` is over: keep it for reuse when it can be, else free its slot."""
        if conn.reusable and not self.closed:
            while self._waiters:
                fut = self._waiters.popleft()
                if not fut.done():
                    fut.set_result(conn)
                    return
            conn.mark_idle()
            self._idle.append(conn)
            return
        conn.abort()
        self._release_slot(conn)

    def forget(self, conn: Connection) -> None:
        """`conn` closed (called from `connection_lost`)."""
        try:
            self._idle.remove(conn)  # rare: an idle connection the server closed
        except ValueError:
            return  # busy or already released: its owner frees the slot in give_back()
        self._release_slot(conn)

    def _release_slot(self, conn: Connection) -> None:
        if conn.slot_freed:
            return
        conn.slot_freed = True
        self.open -= 1
        self._hand_slot()

    def _hand_slot(self) -> None:
        """A slot or a connect turn freed: the first waiter (if any) may open a connection."""
        while self._waiters and self.open < self.max_connections and self._connecting < self.max_connecting:
            fut = self._waiters.popleft()
            if not fut.done():
                self.open += 1
                self._connecting += 1  # reserved for the waiter; it re-counts in _connect_in_slot
                fut.set_result(None)
                return

    def _close_idle(self, conn: Connection) -> None:
        conn.abort()
        self._release_slot(conn)

    def close(self) -> None:
        self.closed = True
        while self._idle:
            self._close_idle(self._idle.pop())

    @property
    def idle(self) -> int:
        return len(self._idle)


class UpstreamPools:
    """A `HostPool` per upstream, created on first use; `retire()` drops pools of departed upstreams
    once their in-flight requests can no longer be running."""

    def __init__(
        self,
        *,
        max_connections: int = 1024,
        connect_timeout_s: float = 2.0,
        idle_expiry_s: float = 4.0,
        ssl_context: ssl.SSLContext | None = None,
    ) -> None:
        self.max_connections = max_connections
        self.connect_timeout_s = connect_timeout_s
        self.idle_expiry_s = idle_expiry_s
        self._ssl = ssl_context
        self._pools: dict[tuple[str, int, bool], HostPool] = {}

    def get(self, host: str, port: int, tls: bool = False) -> HostPool:
        key = (host, port, tls)
        pool = self._pools.get(key)
        if pool is None:
            if tls and self._ssl is None:
                self._ssl = ssl.create_default_context()  # verifies certificates and host names
            pool = self._pools[key] = HostPool(
                host,
                port,
                max_connections=self.max_connections,
                connect_timeout_s=self.connect_timeout_s,
                idle_expiry_s=self.idle_expiry_s,
                ssl_context=self._ssl if tls else None,
            )
        return pool

    def keep_only(self, live: set[tuple[str, int]]) -> None:
        """Close the idle connections of upstreams not in `live` (busy ones close when released)."""
        for key in [k for k in self._pools if k[:2] not in live]:
            self._pools.pop(key).close()

    def close(self) -> None:
        for pool in self._pools.values():
            pool.close()
        self._pools.clear()


__all__ = ["HostPool", "Response", "UpstreamPools"]
