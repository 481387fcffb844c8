"""The one redis-server launcher (fleetgate/redis_server.py) that the benches and the tests' Redis
fixture both use (re-exported by bench/procs.py and tests/procs.py)."""

from __future__ import annotations

import shutil
import socket
import time
from pathlib import Path

import pytest

from bench import procs as bench_procs
from fleetgate.redis_server import start_redis
from tests import procs as test_procs

pytestmark = pytest.mark.skipif(shutil.which("redis-server") is None, reason="redis-server not installed")


def _ping(port: int) -> bytes:
    with socket.create_connection(("127.0.0.1", port), timeout=2) as s:
        s.sendall(b"PING\r\n")
        return s.recv(64)


def test_started_redis_answers_at_once_and_stop_ends_it(tmp_path: Path) -> None:
    srv = start_redis(tmp_path)
    try:
        assert srv.url == f"redis://127.0.0.1:{srv.port}/0"
        assert _ping(srv.port) == b"+PONG\r\n"
    finally:
        srv.stop()
    assert srv.proc.returncode is not None
    with pytest.raises(OSError):
        _ping(srv.port)


def test_a_killed_redis_restarts_on_the_same_port(tmp_path: Path) -> None:
    first = start_redis(tmp_path)
    first.proc.kill()
    first.proc.wait(5)
    again = start_redis(tmp_path, port=first.port)
    try:
        assert again.port == first.port
        assert _ping(again.port) == b"+PONG\r\n"
    finally:
        again.stop()


def test_a_redis_that_cannot_start_fails_fast(tmp_path: Path) -> None:
    t0 = time.monotonic()
    with pytest.raises(RuntimeError, match="did not accept connections"):
        start_redis(tmp_path / "missing-dir")  # redis-server exits: it cannot chdir there
    assert time.monotonic() - t0 < 5


def test_benches_and_tests_start_redis_with_the_same_launcher() -> None:
    assert bench_procs.start_redis is test_procs.start_redis is start_redis
