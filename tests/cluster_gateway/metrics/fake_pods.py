"""Tiny model-server stand-ins on 127.0.0.1: a real uvicorn server per pod with a mutable state.

Each pod serves `/metrics` (a body the test sets), `/v1/models` and optionally TGI's `/info`, and can
hang, fail with a status, or be stopped (connection refused), so the scraper meets real sockets.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field

import uvicorn

from cluster_gateway.pool import Endpoint, EngineType
from common.http import Receive, Scope, Send


@dataclass
class FakePod:
    name: str
    body: bytes
    models: list[str] = field(default_factory=lambda: ["llama"])
    models_via_info: bool = False  # TGI style: /v1/models is 404, /info has model_id
    hang: bool = False
    status: int = 200
    metrics_hits: int = 0
    models_hits: int = 0
    port: int = 0
    _release: asyncio.Event = field(default_factory=asyncio.Event)
    _server: uvicorn.Server | None = None
    _task: asyncio.Task[None] | None = None

    def endpoint(self, engine: EngineType | None = None) -> Endpoint:
        return Endpoint(name=self.name, address="127.0.0.1", port=self.port, engine=engine)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            return
        path = scope["path"]
        if path == "/metrics":
            self.metrics_hits += 1
            if self.hang:
                await self._release.wait()
            await _respond(send, self.status, self.body, b"text/plain; version=0.0.4")
        elif path == "/v1/models" and not self.models_via_info:
            self.models_hits += 1
            data = [{"id": m, "object": "model", "owned_by": "test"} for m in self.models]
            await _respond(
                send, 200, json.dumps({"object": "list", "data": data}).encode(), b"application/json"
            )
        elif path == "/info" and self.models_via_info:
            self.models_hits += 1
            await _respond(send, 200, json.dumps({"model_id": self.models[0]}).encode(), b"application/json")
        else:
            await _respond(send, 404, b'{"error": "not found"}', b"application/json")

    async def start(self) -> None:
        config = uvicorn.Config(
            self,
            host="127.0.0.1",
            port=self.port,
            lifespan="off",
            log_level="warning",
            timeout_graceful_shutdown=1,
        )
        self._server = uvicorn.Server(config)
        self._task = asyncio.create_task(self._server.serve())
        while not self._server.started:
            if self._task.done():
                self._task.result()
            await asyncio.sleep(0.01)
        self.port = self._server.servers[0].sockets[0].getsockname()[1]

    async def stop(self) -> None:
        """Stop listening (later connections are refused); the port is kept for a restart."""
        self._release.set()
        if self._server is not None and self._task is not None:
            self._server.should_exit = True
            await self._task
        self._server = self._task = None
        self._release = asyncio.Event()


async def _respond(send: Send, status: int, body: bytes, content_type: bytes) -> None:
    await send(
        {"type": "http.response.start", "status": status, "headers": [(b"content-type", content_type)]}
    )
    await send({"type": "http.response.body", "body": body})


@asynccontextmanager
async def running(*pods: FakePod) -> AsyncIterator[tuple[FakePod, ...]]:
    for pod in pods:
        await pod.start()
    try:
        yield pods
    finally:
        for pod in pods:
            await pod.stop()
