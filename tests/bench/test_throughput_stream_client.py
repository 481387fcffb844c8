"""The throughput bench's raw-socket client against the real static backend (bench/static_backend.py)
in this process: streams complete with every event counted, a short stream is an error, timeouts and
refused connections are counted rather than raised, and the paced probe keeps its connections."""

from __future__ import annotations

import asyncio
import socket
from collections.abc import AsyncIterator

import pytest

from bench import rawclient, static_backend

CHAT = "/v1/chat/completions"


@pytest.fixture
async def backend() -> AsyncIterator[int]:
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    server = await static_backend.serve(
        sock, static_backend.BackendConfig(stream_chunks=5, stream_interval_ms=5)
    )
    try:
        yield sock.getsockname()[1]
    finally:
        server.close()
        await server.wait_closed()


def _req(port: int, stream: bool) -> bytes:
    body = {"model": static_backend.MODEL, "messages": [{"role": "user", "content": "hi"}], "stream": stream}
    return rawclient.build_request("127.0.0.1", port, CHAT, body, {"authorization": "Bearer k"})


async def test_fifty_concurrent_streams_complete_with_ttfb(backend: int) -> None:
    run = await asyncio.wait_for(
        rawclient.concurrent_streams("127.0.0.1", backend, _req(backend, True), 50, events=5, timeout_s=20),
        30,
    )
    assert run.failed == 0, run.errors
    assert len(run.ttfb_s) == 50 and all(0 < t < run.wall_s for t in run.ttfb_s)


async def test_a_stream_shorter_than_expected_is_an_error(backend: int) -> None:
    # the backend sends 5 data events + [DONE] = 6 `data:` lines; asking for 50 must fail every stream
    run = await rawclient.concurrent_streams(
        "127.0.0.1", backend, _req(backend, True), 3, events=50, timeout_s=20
    )
    assert run.errors == {"incomplete stream": 3} and run.ttfb_s == []


async def test_timeouts_and_refusals_are_counted_not_raised(backend: int) -> None:
    run = await rawclient.concurrent_streams(
        "127.0.0.1", backend, _req(backend, True), 4, events=5, timeout_s=0.01
    )
    # on a loaded machine even the connect may take longer than 10 ms: both are counted timeouts
    assert run.failed == 4 and set(run.errors) <= {"timeout", "connect timeout"}, run.errors
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        dead = s.getsockname()[1]  # bound, not listening: connections are refused
        out = await rawclient.one_shot("127.0.0.1", dead, _req(dead, False), timeout_s=2)
    assert out.error.startswith("connect error")


async def test_non_200_is_an_error_with_its_status(backend: int) -> None:
    raw = rawclient.build_request("127.0.0.1", backend, "/nope", {})
    out = await rawclient.one_shot("127.0.0.1", backend, raw, timeout_s=5)
    assert (out.status, out.error) == (404, "HTTP 404")
    assert out.body_head == b'{"error":{}}'  # what the server said, kept for the report


async def test_paced_probe_reuses_connections_and_measures_each_target(backend: int) -> None:
    targets = [("127.0.0.1", backend, _req(backend, False))] * 2
    run = await asyncio.wait_for(
        rawclient.paced_alternating(targets, rps=50, seconds=0.4, timeout_s=5, warm=2), 20
    )
    assert [len(x) for x in run.latencies_s] == [20, 20]
    assert all(not e for e in run.errors)
    seq = await rawclient.sequential("127.0.0.1", backend, _req(backend, False), 5, timeout_s=5)
    assert len(seq.latencies_s[0]) == 5
