"""How the scraper GETs a pod's endpoints: a lean keep-alive client by default, or a given httpx client.

Both raise `FetchError` with a reason label (`connect`, `protocol`, `http_status`, `bad_body`) so the
scraper counts failures the same way whichever is used. Deadlines are the caller's (asyncio.timeout).
"""

from __future__ import annotations

from typing import Protocol

import httpx

from cluster_gateway.metrics.http_get import HttpGetError, PodConnection
from cluster_gateway.pool import Endpoint

__all__ = ["FetchError", "Fetcher", "HttpxFetcher", "KeepAliveFetcher"]

MAX_BODY_BYTES = 16 * 1024 * 1024


class FetchError(Exception):
    def __init__(self, reason: str, detail: str, status: int | None = None) -> None:
        super().__init__(detail)
        self.reason = reason
        self.status = status


class Fetcher(Protocol):
    async def get(self, endpoint: Endpoint, path: str, channel: str) -> bytes:
        """The 200 body of `GET path` on the pod; `channel` separates independent request streams."""
        ...

    def forget(self, name: str) -> None:
        """Drop what is kept for a pod that left the pool."""
        ...

    async def aclose(self) -> None: ...


def _ok(status: int, body: bytes) -> bytes:
    if status != 200:
        raise FetchError("http_status", f"HTTP {status}", status)
    return body


class KeepAliveFetcher:
    """One persistent connection per (pod, channel): scrapes of one pod never queue behind another's."""

    def __init__(self) -> None:
        self._conns: dict[tuple[str, str], PodConnection] = {}

    async def get(self, endpoint: Endpoint, path: str, channel: str) -> bytes:
        key = (endpoint.name, channel)
        conn = self._conns.get(key)
        if conn is None or (conn.host, conn.port) != (endpoint.address, endpoint.port):
            if conn is not None:
                conn.close()
            conn = self._conns[key] = PodConnection(endpoint.address, endpoint.port)
        try:
            status, body = await conn.get(path, MAX_BODY_BYTES)
        except ConnectionError as exc:
            raise FetchError("connect", str(exc)) from None
        except (HttpGetError, OSError, ValueError) as exc:
            raise FetchError("protocol", f"{type(exc).__name__}: {exc}") from None
        return _ok(status, body)

    def forget(self, name: str) -> None:
        for key in [k for k in self._conns if k[0] == name]:
            self._conns.pop(key).close()

    async def aclose(self) -> None:
        for conn in self._conns.values():
            conn.close()
        self._conns.clear()


class HttpxFetcher:
    """Uses a caller's httpx client (its transport, TLS and limits); the caller closes it."""

    _IDENTITY = {"accept-encoding": "identity"}  # see http_get: inflating costs more than parsing

    def __init__(self, client: httpx.AsyncClient) -> None:
        self._client = client

    async def get(self, endpoint: Endpoint, path: str, channel: str) -> bytes:
        try:
            resp = await self._client.get(endpoint.url + path, headers=self._IDENTITY)
        except httpx.TimeoutException:
            raise TimeoutError(f"no answer from {endpoint.hostport}") from None
        except httpx.HTTPError as exc:
            raise FetchError("connect", f"{type(exc).__name__}: {exc}") from None
        if len(resp.content) > MAX_BODY_BYTES:
            raise FetchError("bad_body", f"body of {len(resp.content)} bytes")
        return _ok(resp.status_code, resp.content)

    def forget(self, name: str) -> None:
        pass

    async def aclose(self) -> None:
        pass
