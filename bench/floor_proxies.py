"""Three calibration proxies with no routing logic: what a lone request costs below Fleetgate's own code.

The throughput bench's added-latency column (one request at a time, 20/s) puts the embedded proxy
at ~1 ms. These three forward the same requests to the same backend, so `python -m bench.row_cpu
floor-raw|floor-pool|floor-server --mode paced` splits that figure into its layers:

- `raw`: uvloop + httptools protocols, one upstream keep-alive connection per client connection,
  bytes passed through unparsed except for message ends. The least any Python proxy spends.
- `pool`: the same raw server protocol, with each request sent through Fleetgate's upstream pool
  (`common.upstream.HostPool`) from a task of its own, as any asyncio proxy that awaits its
  upstream must: `raw` plus the pool and the task, without uvicorn.
- `server`: Fleetgate's own server path (`common.asgi.server_config`: uvicorn, the guarded
  httptools protocol, the JSON catch-all) and its upstream pool (`common.upstream`), with an ASGI
  app that only reads the body, forwards it and answers. Everything the embedded proxy does
  above this is its request logic (parse, admission, scheduling, retries, metrics, logs).

Not products: no error handling beyond closing the connection, one upstream, HTTP/1.1 with
content-length responses (what `bench.static_backend` answers to a non-streaming request).

    python -m bench.floor_proxies raw --upstream http://127.0.0.1:8000 --port 0
"""

from __future__ import annotations

import argparse
import asyncio
import socket
import sys
from collections.abc import Sequence
from http import HTTPStatus
from typing import Any
from urllib.parse import urlsplit

import httptools
import uvicorn
import uvloop

from common.asgi import listen_socket, read_body, server_config
from common.config.server import HttpServer
from common.http import send_body
from common.upstream.pool import HostPool

LISTENING = "floor proxy listening on http://127.0.0.1:{port}"
_JSON_TYPE = [(b"content-type", b"application/json")]


class _Connection(asyncio.Protocol):
    """A TCP connection with Nagle off (else every keep-alive request stalls ~40 ms here)."""

    transport: Any = None  # uvloop's transports are not asyncio.Transport subclasses

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        transport.get_extra_info("socket").setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.transport = transport


class _Upstream(_Connection):
    """The backend side of one client connection: hands each whole response to the client."""

    def __init__(self, client: _Client) -> None:
        self.client = client
        self.parser = httptools.HttpResponseParser(self)
        self.parts: list[bytes] = []

    def data_received(self, data: bytes) -> None:
        self.parts.append(data)
        self.parser.feed_data(data)

    def on_message_complete(self) -> None:
        self.client.answer(b"".join(self.parts))
        self.parts = []

    def connection_lost(self, exc: Exception | None) -> None:
        self.client.close()


class _Client(_Connection):
    """One client connection; requests that arrive before its upstream connection is open wait."""

    def __init__(self, host: str, port: int) -> None:
        self.upstream_addr = (host, port)
        self.parser = httptools.HttpRequestParser(self)
        self.parts: list[bytes] = []
        self.upstream: _Upstream | None = None
        self.waiting: list[bytes] = []

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        super().connection_made(transport)
        asyncio.get_running_loop().create_task(self._connect())

    async def _connect(self) -> None:
        try:
            _, up = await asyncio.get_running_loop().create_connection(
                lambda: _Upstream(self), *self.upstream_addr
            )
        except OSError:
            self.close()
            return
        self.upstream = up
        for request in self.waiting:
            up.transport.write(request)
        self.waiting = []

    def data_received(self, data: bytes) -> None:
        self.parts.append(data)
        self.parser.feed_data(data)

    def on_message_complete(self) -> None:
        request, self.parts = b"".join(self.parts), []
        if self.upstream is None:
            self.waiting.append(request)
        else:
            self.upstream.transport.write(request)

    def answer(self, data: bytes) -> None:
        if self.transport is not None:
            self.transport.write(data)

    def close(self) -> None:
        if self.transport is not None:
            self.transport.close()
        if self.upstream is not None and self.upstream.transport is not None:
            self.upstream.transport.close()

    def connection_lost(self, exc: Exception | None) -> None:
        self.transport = None
        self.close()


class _PoolClient(_Connection):
    """One client connection whose requests go through the upstream pool, one task per request."""

    def __init__(self, pool: HostPool) -> None:
        self.pool = pool
        self.parser = httptools.HttpRequestParser(self)
        self.url = b""
        self.body: list[bytes] = []

    def data_received(self, data: bytes) -> None:
        self.parser.feed_data(data)

    def on_url(self, url: bytes) -> None:
        self.url = url

    def on_body(self, body: bytes) -> None:
        self.body.append(body)

    def on_message_complete(self) -> None:
        body, self.body = b"".join(self.body), []
        asyncio.get_running_loop().create_task(self._forward(self.url, body))

    async def _forward(self, target: bytes, body: bytes) -> None:
        try:
            resp = await self.pool.request(b"POST", target, _JSON_TYPE, body)
            try:
                data = await resp.read()
            finally:
                resp.release()
        except Exception:  # no error answers here: closing the connection says it
            if self.transport is not None:
                self.transport.close()
            return
        if self.transport is not None:
            self.transport.write(
                b"HTTP/1.1 %d %s\r\ncontent-type: application/json\r\ncontent-length: %d\r\n\r\n%s"
                % (resp.status, HTTPStatus(resp.status).phrase.encode(), len(data), data)
            )

    def connection_lost(self, exc: Exception | None) -> None:
        self.transport = None


async def _serve_raw(host: str, port: int, listen: socket.socket) -> None:
    server = await asyncio.get_running_loop().create_server(lambda: _Client(host, port), sock=listen)
    print(LISTENING.format(port=listen.getsockname()[1]), flush=True)
    await server.serve_forever()


async def _serve_pool(host: str, port: int, listen: socket.socket) -> None:
    pool = HostPool(host, port)
    server = await asyncio.get_running_loop().create_server(lambda: _PoolClient(pool), sock=listen)
    print(LISTENING.format(port=listen.getsockname()[1]), flush=True)
    await server.serve_forever()


async def _serve_server_path(host: str, port: int, listen: socket.socket) -> None:
    pool = HostPool(host, port)

    async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
        body = await read_body(receive, None, 1 << 20)
        resp = await pool.request(b"POST", scope["path"].encode(), _JSON_TYPE, body)
        try:
            data = await resp.read()
        finally:
            resp.release()
        await send_body(send, resp.status, data, _JSON_TYPE)

    server = uvicorn.Server(server_config(app, HttpServer()))
    print(LISTENING.format(port=listen.getsockname()[1]), flush=True)
    await server.serve(sockets=[listen])


SERVERS = {"raw": _serve_raw, "pool": _serve_pool, "server": _serve_server_path}


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.floor_proxies", description=__doc__.splitlines()[0])
    ap.add_argument("kind", choices=sorted(SERVERS))
    ap.add_argument("--upstream", required=True, help="the backend, http://host:port")
    ap.add_argument("--port", type=int, default=0)
    args = ap.parse_args(argv)
    up = urlsplit(args.upstream)
    if up.hostname is None or up.port is None:
        ap.error("--upstream needs http://host:port")
    listen = listen_socket("127.0.0.1", args.port)
    uvloop.run(SERVERS[args.kind](up.hostname, up.port, listen))
    return 0


if __name__ == "__main__":
    sys.exit(main())
