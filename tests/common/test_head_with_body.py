"""`HeadWithBody` (common/http_server.py): a response's head goes out in one write with its first
body bytes; an interim `100 Continue` is never held; a head with no body following is flushed at
the next loop iteration, and before a close. A recording transport stands in for the socket."""

from __future__ import annotations

import asyncio

from common.http_server import HeadWithBody

HEAD = b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\n"
CONTINUE = b"HTTP/1.1 100 Continue\r\n\r\n"


class Recorder:
    def __init__(self) -> None:
        self.writes: list[bytes] = []
        self.closed = False

    def write(self, data: bytes) -> None:
        self.writes.append(data)

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


async def test_an_interim_continue_is_written_at_once() -> None:
    rec = Recorder()
    t = HeadWithBody(rec, asyncio.get_running_loop())
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
