"""`HeadWithBody` (common/http_server.py): a response's head goes out in one write with its first
body bytes; an interim `100 Continue` goes out at once while the body is still to come, and is held
(then dropped if the final head comes first) when the body came whole; a head with no body following
is flushed at the next loop iteration, and before a close. A recording transport stands in for the
socket; a real server checks the wire."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket
from collections.abc import AsyncIterator
from typing import Any

import pytest

from common import http_server
from common.asgi import EmbeddedServer, server_config
from common.config.server import HttpServer
from common.http_server import HeadWithBody

HEAD = b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\n"
CONTINUE = b"HTTP/1.1 100 Continue\r\n\r\n"


async def _echo(scope: dict[str, Any], receive: Any, send: Any) -> None:
    body = b""
    more = True
    while more:
        msg = await receive()
        body += msg.get("body", b"")
        more = msg.get("more_body", False)
    await send(
        {"type": "http.response.start", "status": 200, "headers": [(b"content-length", b"%d" % len(body))]}
    )
    await send({"type": "http.response.body", "body": body})


@contextlib.asynccontextmanager
async def echo_server() -> AsyncIterator[int]:
    """The servers' own stack (guarded httptools protocol, HeadWithBody) answering with the body."""
    server = EmbeddedServer(server_config(_echo, HttpServer()))
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    port = await server.start_on(sock)
    try:
        yield port
    finally:
        await server.stop(logging.getLogger("test"))


class Recorder:
    def __init__(self) -> None:
        self.writes: list[bytes] = []
        self.closed = False
        self.wrote = asyncio.Event()

    def write(self, data: bytes) -> None:
        self.writes.append(data)
        self.wrote.set()

    def close(self) -> None:
        self.closed = True

    def is_closing(self) -> bool:
        return self.closed


async def test_the_head_goes_out_with_the_first_body_bytes() -> None:
    rec = Recorder()
    t = HeadWithBody(rec, asyncio.get_running_loop())
    t.write(HEAD)
    assert rec.writes == []
    t.write(b"ok")
    t.write(b"more")
    assert rec.writes == [HEAD + b"ok", b"more"]
    await asyncio.sleep(0)  # the scheduled flush was cancelled: nothing more is written
    assert rec.writes == [HEAD + b"ok", b"more"]


async def test_an_interim_continue_is_written_at_once_while_the_body_is_to_come() -> None:
    rec = Recorder()
    t = HeadWithBody(rec, asyncio.get_running_loop(), body_complete=lambda: False)
    t.write(CONTINUE)
    assert rec.writes == [CONTINUE]
    t.write(HEAD)
    t.write(b"ok")
    assert rec.writes == [CONTINUE, HEAD + b"ok"]


async def test_a_head_without_a_body_is_flushed_at_the_next_iteration() -> None:
    rec = Recorder()
    t = HeadWithBody(rec, asyncio.get_running_loop())
    t.write(HEAD)
    await asyncio.sleep(0)
    assert rec.writes == [HEAD]
    t.write(b"ok")  # later bytes pass straight through
    assert rec.writes == [HEAD, b"ok"]


async def test_a_close_flushes_the_head_first() -> None:
    rec = Recorder()
    t = HeadWithBody(rec, asyncio.get_running_loop())
    t.write(HEAD)
    t.close()
    assert rec.writes == [HEAD] and rec.closed and t.is_closing()


async def test_a_held_head_is_dropped_when_the_connection_closed_meanwhile() -> None:
    rec = Recorder()
    t = HeadWithBody(rec, asyncio.get_running_loop())
    t.write(HEAD)
    rec.closed = True  # the peer went away before the flush
    await asyncio.sleep(0)
    assert rec.writes == []


async def test_with_the_body_whole_the_final_head_stands_for_the_continue() -> None:
    rec = Recorder()
    t = HeadWithBody(rec, asyncio.get_running_loop(), body_complete=lambda: True, continue_delay_s=60)
    t.write(CONTINUE)
    assert rec.writes == []  # held
    t.write(HEAD)
    t.write(b"ok")
    assert rec.writes == [HEAD + b"ok"]
    assert t._continue is None  # the timer is cancelled: no 100 after the answer


async def test_with_the_body_whole_a_slow_answer_gets_its_continue_after_the_delay() -> None:
    rec = Recorder()
    t = HeadWithBody(rec, asyncio.get_running_loop(), body_complete=lambda: True, continue_delay_s=0.001)
    t.write(CONTINUE)
    assert rec.writes == []
    await asyncio.wait_for(rec.wrote.wait(), 10)  # the loop runs the timer
    assert rec.writes == [CONTINUE]
    t.write(HEAD)
    t.write(b"ok")
    assert rec.writes == [CONTINUE, HEAD + b"ok"]


async def test_a_held_continue_is_never_written_after_a_close() -> None:
    rec = Recorder()
    t = HeadWithBody(rec, asyncio.get_running_loop(), body_complete=lambda: True, continue_delay_s=0.001)
    t.write(CONTINUE)
    t.close()
    assert t._continue is None and rec.writes == [] and rec.closed


def _expect_request(body: bytes) -> bytes:
    return (
        b"POST /echo HTTP/1.1\r\nhost: t\r\nexpect: 100-continue\r\n"
        + b"content-length: %d\r\n\r\n" % len(body)
        + body
    )


async def _read_response(reader: asyncio.StreamReader) -> bytes:
    data = b""
    while b"\r\n\r\n" not in data.replace(CONTINUE, b"", 1) or not data.endswith(b"hello"):
        chunk = await asyncio.wait_for(reader.read(65536), 10)
        assert chunk, data
        data += chunk
    return data


async def test_on_the_wire_a_whole_request_answered_at_once_gets_no_continue(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(http_server, "CONTINUE_DELAY_S", 3600.0)  # the answer, however late, is first
    async with echo_server() as port:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(_expect_request(b"hello"))  # the head and the whole body, as the router sends
        data = await _read_response(reader)
        assert data.startswith(b"HTTP/1.1 200 OK\r\n") and CONTINUE not in data
        writer.close()


async def test_on_the_wire_a_client_waiting_to_send_its_body_gets_the_continue_at_once(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(http_server, "CONTINUE_DELAY_S", 3600.0)  # a held 100 would never come
    async with echo_server() as port:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        request = _expect_request(b"hello")
        writer.write(request[: -len(b"hello")])  # the head alone, as curl sends a large body
        first = await asyncio.wait_for(reader.readexactly(len(CONTINUE)), 10)
        assert first == CONTINUE
        writer.write(b"hello")
        data = await _read_response(reader)
        assert data.startswith(b"HTTP/1.1 200 OK\r\n")
        writer.close()
