"""A static OpenAI-style backend fast enough that a router in front of it is the bottleneck.

Raw asyncio + httptools, keep-alive, TCP_NODELAY: tens of thousands of requests/s on one core.
`POST /v1/chat/completions` and `/v1/completions` answer a fixed completion; with `"stream": true`
they send `stream_chunks` SSE events `stream_interval_ms` apart, then `[DONE]` (the 50 x 10 ms shape
of the throughput bench). `GET /metrics` serves a small vLLM-style body so gateways see a ready pod,
and `GET /v1/models` lists the model. Used by `bench/throughput.py` and by data-path tests.

    python -m bench.static_backend --port 8000 [--chunks 50 --interval-ms 10]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import socket
from dataclasses import dataclass
from typing import cast

import httptools

MODEL = "static-model"

_COMPLETION = (
    b'{"id":"cmpl-static","object":"chat.completion","created":1,"model":"' + MODEL.encode() + b'",'
    b'"choices":[{"index":0,"message":{"role":"assistant","content":"ok"},"finish_reason":"stop"}],'
    b'"usage":{"prompt_tokens":8,"completion_tokens":1,"total_tokens":9}}'
)
_CHUNK = (
    b'data: {"id":"cmpl-static","object":"chat.completion.chunk","created":1,"model":"'
    + MODEL.encode()
    + b'","choices":[{"index":0,"delta":{"content":"tok "},"finish_reason":null}]}\n\n'
)
_MODELS = (
    b'{"object":"list","data":[{"id":"'
    + MODEL.encode()
    + b'","object":"model","created":1,"owned_by":"bench"}]}'
)
_METRICS = (
    b'vllm:num_requests_waiting{model_name="' + MODEL.encode() + b'"} 0\n'
    b'vllm:num_requests_running{model_name="' + MODEL.encode() + b'"} 0\n'
    b'vllm:kv_cache_usage_perc{model_name="' + MODEL.encode() + b'"} 0.0\n'
)
_SERVED = b'vllm:request_success_total{model_name="' + MODEL.encode() + b'"} '
_served = [0]  # requests answered by this process: counters that move, as a real engine's do
# (a /metrics body that never changes while requests are sent is what the gateway calls frozen)


@dataclass
class BackendConfig:
    stream_chunks: int = 50
    stream_interval_ms: float = 10.0


def _response(status: bytes, ctype: bytes, body: bytes) -> bytes:
    return (
        b"HTTP/1.1 "
        + status
        + b"\r\ncontent-type: "
        + ctype
        + b"\r\ncontent-length: "
        + str(len(body)).encode()
        + b"\r\n\r\n"
        + body
    )


class _Proto(asyncio.Protocol):
    def __init__(self, cfg: BackendConfig) -> None:
        self.cfg = cfg
        self.parser = httptools.HttpRequestParser(self)
        self.transport: asyncio.Transport | None = None
        self.url = b""
        self.body: list[bytes] = []
        self.tasks: set[asyncio.Task[None]] = set()

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)  # uvloop's is not a subclass
        sock = transport.get_extra_info("socket")
        if sock is not None:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def data_received(self, data: bytes) -> None:
        try:
            self.parser.feed_data(data)
        except httptools.HttpParserError:
            assert self.transport is not None
            self.transport.write(_response(b"400 Bad Request", b"application/json", b'{"error":{}}'))
            self.transport.close()

    def connection_lost(self, exc: Exception | None) -> None:
        for t in self.tasks:
            t.cancel()

    def on_url(self, url: bytes) -> None:
        self.url += url

    def on_body(self, body: bytes) -> None:
        self.body.append(body)

    def on_message_complete(self) -> None:
        assert self.transport is not None
        url, body = self.url, b"".join(self.body)
        self.url, self.body = b"", []
        method = self.parser.get_method()
        if method == b"POST" and url.startswith(b"/v1/"):
            _served[0] += 1
            if b'"stream":true' in body.replace(b" ", b""):
                task = asyncio.ensure_future(self._stream())
                self.tasks.add(task)
                task.add_done_callback(self.tasks.discard)
                return
            self.transport.write(_response(b"200 OK", b"application/json", _COMPLETION))
        elif url.startswith(b"/metrics"):
            body = _METRICS + _SERVED + str(_served[0]).encode() + b"\n"
            self.transport.write(_response(b"200 OK", b"text/plain; version=0.0.4", body))
        elif url.startswith(b"/v1/models"):
            self.transport.write(_response(b"200 OK", b"application/json", _MODELS))
        elif url.startswith(b"/health"):
            self.transport.write(_response(b"200 OK", b"application/json", b"{}"))
        else:
            self.transport.write(_response(b"404 Not Found", b"application/json", b'{"error":{}}'))

    async def _stream(self) -> None:
        t = self.transport
        assert t is not None
        t.write(
            b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ncache-control: no-cache\r\n"
            b"transfer-encoding: chunked\r\n\r\n"
        )
        frame = hex(len(_CHUNK))[2:].encode() + b"\r\n" + _CHUNK + b"\r\n"
        for _ in range(self.cfg.stream_chunks):
            await asyncio.sleep(self.cfg.stream_interval_ms / 1000.0)
            if t.is_closing():
                return
            t.write(frame)
        done = b"data: [DONE]\n\n"
        t.write(hex(len(done))[2:].encode() + b"\r\n" + done + b"\r\n0\r\n\r\n")


async def serve(sock: socket.socket, cfg: BackendConfig) -> asyncio.Server:
    loop = asyncio.get_running_loop()
    return await loop.create_server(lambda: _Proto(cfg), sock=sock, backlog=4096)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.static_backend", description=__doc__.split("\n")[0])
    ap.add_argument("--host", default="127.0.0.1", help="address to bind (loopback by default)")
    ap.add_argument("--port", type=int, default=0, help="port (0: any free one, printed on start)")
    ap.add_argument("--chunks", type=int, default=50, help="SSE events per streamed answer")
    ap.add_argument("--interval-ms", type=float, default=10.0, help="gap between SSE events")
    args = ap.parse_args(argv)
    try:
        import uvloop

        uvloop.install()
    except ImportError:
        pass
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((args.host, args.port))
    cfg = BackendConfig(args.chunks, args.interval_ms)

    async def run() -> None:
        server = await serve(sock, cfg)
        print(f"static backend listening on http://{args.host}:{sock.getsockname()[1]}", flush=True)
        await server.serve_forever()

    with contextlib.suppress(KeyboardInterrupt):
        asyncio.run(run())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
