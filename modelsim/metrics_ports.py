"""Only `/metrics` of many simulated pods, one port each, from one process: for scrape-scale benches.

A `SimFleet` pod serves the whole OpenAI surface through uvicorn (h11), ~150 µs of CPU a request:
1,000 pods scraped ten times a second would need more cores than the machine has, and the bench
would measure the simulator. Here each pod's port answers `GET /metrics[?name[]=...]` with its
`MetricsExporter` body (the same bytes, filters honoured as in `app.py`) through a minimal
keep-alive HTTP/1.1 protocol, and anything else with a 404. The pods' engines are not started:
they stay idle, which is what a scrape of an idle pod costs (the gauges are rendered every time).
"""

from __future__ import annotations

import asyncio
import socket
from functools import partial
from typing import cast

from modelsim.app import name_filter
from modelsim.fleet import PodSpec
from modelsim.pod import SimPod

__all__ = ["MetricsPorts"]

_NOT_FOUND = b"HTTP/1.1 404 Not Found\r\ncontent-length: 0\r\n\r\n"
_HEAD = b"HTTP/1.1 200 OK\r\ncontent-type: text/plain; version=0.0.4; charset=utf-8\r\ncontent-length: "


class _MetricsProtocol(asyncio.Protocol):
    def __init__(self, pod: SimPod, counter: list[int], index: int) -> None:
        self._index = index
        self._pod = pod
        self._counter = counter
        self._buf = b""
        self._transport: asyncio.Transport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self._transport = cast(asyncio.Transport, transport)  # uvloop's is not an asyncio.Transport

    def data_received(self, data: bytes) -> None:
        self._buf += data
        while True:
            end = self._buf.find(b"\r\n\r\n")
            if end < 0:
                if len(self._buf) > 65536 and self._transport is not None:
                    self._transport.close()
                return
            head, self._buf = self._buf[:end], self._buf[end + 4 :]
            self._answer(head.split(b"\r\n", 1)[0])

    def _answer(self, request_line: bytes) -> None:
        assert self._transport is not None
        parts = request_line.split(b" ")
        target = parts[1] if len(parts) == 3 and parts[0] == b"GET" else b""
        path, _, query = target.partition(b"?")
        if path not in (b"/metrics", b"/metrics/"):  # vLLM serves both (cluster_gateway/metrics/filtered.py)
            self._transport.write(_NOT_FOUND)
            return
        self._counter[self._index] += 1
        body = self._pod.exporter.render(name_filter(query)).encode()
        self._transport.write(_HEAD + str(len(body)).encode() + b"\r\n\r\n" + body)


class MetricsPorts:
    """`count` simulated pods (`spec` each, seeds differing), one listening port per pod."""

    def __init__(self, count: int, spec: PodSpec | None = None, host: str = "127.0.0.1") -> None:
        base = spec or PodSpec()
        base.validate()
        self.host = host
        self.pods = [
            SimPod(i, PodSpec(**{**base.__dict__, "seed": base.seed + i}), host) for i in range(count)
        ]
        self.served = [0] * count  # /metrics answers per pod
        self._servers: list[asyncio.Server] = []

    async def start(self) -> list[int]:
        """Listen on one port per pod (port 0 each: the kernel picks); returns the ports."""
        loop = asyncio.get_running_loop()
        for i, pod in enumerate(self.pods):
            sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            sock.bind((self.host, 0))
            sock.setblocking(False)
            server = await loop.create_server(
                partial(_MetricsProtocol, pod, self.served, i), sock=sock, backlog=4096
            )
            pod.port = int(sock.getsockname()[1])
            self._servers.append(server)
        return [pod.port for pod in self.pods]

    async def stop(self) -> None:
        for server in self._servers:
            server.close()
        self._servers.clear()
