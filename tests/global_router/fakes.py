"""Tiny real HTTP servers standing in for cluster gateways (test-only), on 127.0.0.1 port 0."""

from __future__ import annotations

import asyncio
import socket
from contextlib import nullcontext
from typing import Any

import msgspec
import uvicorn

from common.http import Receive, Scope, Send
from tests.asgi_fakes import read_request_body


class _Server(uvicorn.Server):
    def capture_signals(self) -> Any:
        return nullcontext()


class FakeGateway:
    """Answers completions like a cluster gateway would; `mode` switches its behaviour live.

    modes: ok | error<status> (401 403 404 400 422 429 500) | break_stream (dies after two chunks) | slow (delay_s before answering)
    """

    def __init__(self, name: str, *, completion_tokens: int = 5, chunks: int = 5) -> None:
        self.name = name
        self.mode = "ok"
        self.delay_s = 0.0
        self.completion_tokens = completion_tokens
        self.chunks = chunks
        self.requests: list[dict[str, str]] = []  # headers of each request received
        self.bodies: list[dict[str, Any]] = []
        self._server: _Server | None = None
        self._task: asyncio.Task[None] | None = None
        self.port = 0

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            return
        body = await read_request_body(receive)
        self.requests.append({k.decode(): v.decode() for k, v in scope["headers"]})
        doc = msgspec.json.decode(body) if body else {}
        self.bodies.append(doc)
        if self.delay_s:
            await asyncio.sleep(self.delay_s)
        if self.mode.startswith("error"):
            status = int(self.mode[-3:])
            err = {
                "error": {
                    "message": f"{self.name} says {status}",
                    "type": "server_error",
                    "param": None,
                    "code": None,
                }
            }
            await self._json(send, status, err)
            return
        prompt_tokens = 7
        if doc.get("stream"):
            await send(
                {
                    "type": "http.response.start",
                    "status": 200,
                    "headers": [(b"content-type", b"text/event-stream")],
                }
            )
            for i in range(self.chunks):
                if self.mode == "break_stream" and i == 2:
                    raise RuntimeError("gateway died mid-stream")
                chunk = {
                    "id": "c",
                    "object": "chat.completion.chunk",
                    "choices": [{"index": 0, "delta": {"content": f"t{i} "}}],
                }
                await send(
                    {
                        "type": "http.response.body",
                        "body": b"data: " + msgspec.json.encode(chunk) + b"\n\n",
                        "more_body": True,
                    }
                )
                await asyncio.sleep(0.01)
            if (doc.get("stream_options") or {}).get("include_usage"):
                usage = {
                    "prompt_tokens": prompt_tokens,
                    "completion_tokens": self.chunks,
                    "total_tokens": prompt_tokens + self.chunks,
                }
                final = {"id": "c", "object": "chat.completion.chunk", "choices": [], "usage": usage}
                await send(
                    {
                        "type": "http.response.body",
                        "body": b"data: " + msgspec.json.encode(final) + b"\n\n",
                        "more_body": True,
                    }
                )
            await send({"type": "http.response.body", "body": b"data: [DONE]\n\n", "more_body": False})
            return
        usage = {
            "prompt_tokens": prompt_tokens,
            "completion_tokens": self.completion_tokens,
            "total_tokens": prompt_tokens + self.completion_tokens,
        }
        resp = {
            "id": "cmpl-1",
            "object": "chat.completion",
            "model": doc.get("model"),
            "choices": [
                {
                    "index": 0,
                    "message": {"role": "assistant", "content": f"from {self.name}"},
                    "finish_reason": "stop",
                }
            ],
            "usage": usage,
        }
        await self._json(send, 200, resp)

    @staticmethod
    async def _json(send: Send, status: int, doc: Any) -> None:
        body = msgspec.json.encode(doc)
        await send(
            {
                "type": "http.response.start",
                "status": status,
                "headers": [(b"content-type", b"application/json")],
            }
        )
        await send({"type": "http.response.body", "body": body, "more_body": False})

    async def start(self) -> None:
        sock = socket.socket()
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        sock.bind(("127.0.0.1", self.port))
        self.port = sock.getsockname()[1]
        self._server = _Server(uvicorn.Config(self, lifespan="off", log_level="critical", access_log=False))
        self._task = asyncio.create_task(self._server.serve(sockets=[sock]))
        while not self._server.started:
            if self._task.done():
                self._task.result()
                raise RuntimeError("fake gateway did not start")
            await asyncio.sleep(0.005)

    async def stop(self) -> None:
        if self._server is not None and self._task is not None:
            self._server.should_exit = True
            self._server.force_exit = True
            await self._task
            self._server = None
