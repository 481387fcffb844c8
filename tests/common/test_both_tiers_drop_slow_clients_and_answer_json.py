"""Both tiers' HTTP servers (common.http_server through common.asgi.server_config): slow and idle
clients are dropped after the header timeout while the server keeps serving, and every malformed
input and every fault a client can meet is OpenAI JSON (or an SSE error event), never plain text."""

from __future__ import annotations

import asyncio
import contextlib
import json
import resource
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass

import httpx
import pytest

from tests.cluster_gateway.integration.conftest import chat, running, tiny
from tests.global_router.router_harness import harness, router_config

HEADER_TIMEOUT_S = 1.0
SERVER = {"headerTimeoutS": HEADER_TIMEOUT_S, "maxConnections": 5000}


@dataclass
class Tier:
    name: str
    host: str
    port: int
    client: httpx.AsyncClient
    headers: dict[str, str]
    set_broken: Callable[[], None]  # every upstream fails (5xx)
    set_broken_stream: Callable[[], None]  # upstreams hang (gateway) or die mid-stream (router)
    refresh: Callable[[], Awaitable[None]] | None = None  # router: republish its cluster's report

    async def post_chat(self, content: str) -> httpx.Response:
        if self.refresh is not None:
            await self.refresh()
        return await self.client.post("/v1/chat/completions", json=chat(content), headers=self.headers)


@contextlib.asynccontextmanager
async def tier(name: str) -> AsyncIterator[Tier]:
    if name == "gateway":
        proxy = {"maxBodyBytes": 1024 * 1024, "firstByteTimeoutS": 1.0}
        async with running([tiny(), tiny()], server=SERVER, proxy=proxy) as (fleet, gw, c):

            def broken() -> None:
                for i in range(2):
                    fleet.set_fault(i, "error", rate=1.0, status=500)

            def broken_stream() -> None:
                for i in range(2):
                    fleet.set_fault(i, "hang")

            yield Tier(name, gw.host, gw.bound_port, c, {}, broken, broken_stream)
        return
    cfg = router_config(server=SERVER, maxBodyBytes=1024 * 1024)
    async with harness(["c1"], cfg) as h:
        await h.publish("c1")
        g = h.gateways["c1"]

        def broken() -> None:
            g.mode = "error500"

        def broken_stream() -> None:
            g.mode = "break_stream"

        host, port = h.router.cfg.host, h.router.http_port
        yield Tier(name, host, port, h.client, h.headers(), broken, broken_stream, lambda: h.publish("c1"))


TIERS = ["gateway", "router"]


async def _closed_within(reader: asyncio.StreamReader, within_s: float) -> float:
    """Seconds until the server closed the connection (EOF or reset)."""
    t0 = time.monotonic()
    with contextlib.suppress(ConnectionError):
        async with asyncio.timeout(within_s):
            while await reader.read(65536):
                pass
    return time.monotonic() - t0


@pytest.mark.parametrize("name", TIERS)
async def test_slowloris_sockets_are_closed_within_the_header_timeout_while_serving(name: str) -> None:
    async with tier(name) as t:
        conns = [await asyncio.open_connection(t.host, t.port) for _ in range(50)]
        head = b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nX-Slow: " + b"a" * 200
        stop = asyncio.Event()

        async def drip(w: asyncio.StreamWriter) -> None:  # one header byte at a time
            for b in head:
                if stop.is_set() or w.is_closing():
                    return
                with contextlib.suppress(ConnectionError):
                    w.write(bytes([b]))
                    await w.drain()
                await asyncio.sleep(0.05)

        drips = [asyncio.create_task(drip(w)) for _, w in conns]
        t0 = time.monotonic()
        # meanwhile the server serves
        r = await t.post_chat("hi")
        assert r.status_code == 200
        closed = await asyncio.gather(*(_closed_within(rd, HEADER_TIMEOUT_S + 10) for rd, _ in conns))
        stop.set()
        await asyncio.gather(*drips)
        worst = time.monotonic() - t0
        assert worst < HEADER_TIMEOUT_S + 3.0, (worst, max(closed))  # slack for a loaded machine
        assert min(closed) >= 0  # every one was closed by the server (not by our deadline)
        for _, w in conns:
            w.close()
        r = await t.post_chat("after")
        assert r.status_code == 200


@pytest.mark.parametrize("name", TIERS)
async def test_two_thousand_idle_connections_are_closed_after_the_header_timeout(name: str) -> None:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    need = 5000  # both ends of 2,000 loopback connections live in this process
    if soft < need:
        if hard != resource.RLIM_INFINITY and hard < need:
            pytest.skip(f"RLIMIT_NOFILE hard limit {hard} < {need}")
        resource.setrlimit(resource.RLIMIT_NOFILE, (need, hard))
    async with tier(name) as t:
        conns = []
        for _ in range(2000):
            conns.append(await asyncio.open_connection(t.host, t.port))
        t0 = time.monotonic()
        await asyncio.gather(*(_closed_within(rd, HEADER_TIMEOUT_S + 20) for rd, _ in conns))
        took = time.monotonic() - t0
        for _, w in conns:
            w.close()
        assert took < HEADER_TIMEOUT_S + 15.0, took
        r = await t.post_chat("still")
        assert r.status_code == 200, r.text


async def _raw(t: Tier, request: bytes) -> tuple[int, dict[str, str], bytes]:
    reader, writer = await asyncio.open_connection(t.host, t.port)
    try:
        writer.write(request)
        await writer.drain()
        async with asyncio.timeout(10):
            data = await reader.read(-1)  # every one of these answers closes the connection
    finally:
        writer.close()
    head, _, body = data.partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    status = int(lines[0].split()[1])
    headers = {k.strip().lower(): v.strip() for k, v in (ln.split(":", 1) for ln in lines[1:] if ":" in ln)}
    return status, headers, body


def _assert_json_error(status: int, ctype: str, body: bytes) -> None:
    assert status >= 400
    assert ctype.split(";")[0] == "application/json", (status, ctype, body[:200])
    err = json.loads(body)["error"]
    assert {"message", "type", "param", "code"} <= set(err)


@pytest.mark.parametrize("name", TIERS)
async def test_every_malformed_input_gets_openai_json(name: str) -> None:
    async with tier(name) as t:
        path = "/v1/chat/completions"
        hdrs = {**t.headers, "content-type": "application/json"}
        deep = b'{"model":' + b"[" * 100_000 + b"]" * 100_000 + b"}"
        cases = {
            "bad json": (path, b'{"model": '),
            "deep json": (path, deep),
            "not an object": (path, b"[1, 2]"),
            "huge body": (path, b'{"x": "' + b"a" * (2 * 1024 * 1024) + b'"}'),
        }
        for what, (p, body) in cases.items():
            r = await t.client.post(p, content=body, headers=hdrs)
            assert r.status_code in (400, 413), (what, r.status_code, r.text[:200])
            _assert_json_error(r.status_code, r.headers.get("content-type", ""), r.content)
        r = await t.client.get(path, headers=t.headers)
        assert r.status_code in (404, 405), r.status_code
        _assert_json_error(r.status_code, r.headers["content-type"], r.content)
        r = await t.client.post("/no/such/path", json={}, headers=t.headers)
        assert r.status_code == 404
        _assert_json_error(r.status_code, r.headers["content-type"], r.content)
        for raw in (
            b"GARBAGE\r\n\r\n",
            b"GET / HTTP/9.9\r\n\r\n",
            b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Length: nope\r\n\r\n",
            b"GET /\x00 HTTP/1.1\r\nHost: x\r\n\r\n",
        ):
            status, headers, body = await _raw(t, raw)
            _assert_json_error(status, headers.get("content-type", ""), body)


@pytest.mark.parametrize("name", TIERS)
async def test_every_upstream_fault_gets_json_or_an_sse_error_event(name: str) -> None:
    async with tier(name) as t:
        t.set_broken()
        r = await t.client.post("/v1/chat/completions", json=chat("x"), headers=t.headers)
        _assert_json_error(r.status_code, r.headers["content-type"], r.content)
        r = await t.client.post("/v1/chat/completions", json=chat("x", stream=True), headers=t.headers)
        _assert_json_error(r.status_code, r.headers["content-type"], r.content)  # nothing streamed yet
        t.set_broken_stream()
        r = await t.client.post("/v1/chat/completions", json=chat("y", stream=True), headers=t.headers)
        ctype = r.headers["content-type"]
        if ctype.startswith("text/event-stream"):
            events = [ln[6:] for ln in r.text.splitlines() if ln.startswith("data: ")]
            assert events[-1] == "[DONE]"
            assert "error" in json.loads(events[-2])
        else:
            _assert_json_error(r.status_code, ctype, r.content)


async def test_a_connection_over_the_cap_gets_a_json_503() -> None:
    async with running([tiny()], server={"maxConnections": 3}) as (_fleet, gw, _c):
        held = [await asyncio.open_connection(gw.host, gw.bound_port) for _ in range(3)]
        status, headers, body = await _raw(
            Tier("gateway", gw.host, gw.bound_port, _c, {}, lambda: None, lambda: None),
            b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n",
        )
        assert status == 503
        _assert_json_error(status, headers["content-type"], body)
        for _, w in held:
            w.close()
