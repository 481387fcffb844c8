"""The redis-server launchers: the benches' (bench/procs.py, for the ratelimit bench) and the tests'
(tests/procs.py, behind the Redis fixture; it also retries a port collision) behave alike."""

from __future__ import annotations

import shutil
import socket
import time
from pathlib import Path
from typing import Any

import pytest

from bench import procs as bench_procs
from tests import procs as test_procs

pytestmark = pytest.mark.skipif(shutil.which("redis-server") is None, reason="redis-server not installed")
LAUNCHERS = pytest.mark.parametrize("procs", [bench_procs, test_procs], ids=["bench", "tests"])


def _ping(port: int) -> bytes:
    with socket.create_connection(("127.0.0.1", port), timeout=2) as s:
        s.sendall(b"PING\r\n")
        return s.recv(64)


@LAUNCHERS
def test_started_redis_answers_at_once_and_stop_ends_it(procs: Any, tmp_path: Path) -> None:
    srv = procs.start_redis(tmp_path)
    try:
        assert srv.url == f"redis://127.0.0.1:{srv.port}/0"
        assert _ping(srv.port) == b"+PONG\r\n"
    finally:
        srv.stop()
    assert srv.proc.returncode is not None
    with pytest.raises(OSError):
        _ping(srv.port)


@LAUNCHERS
def test_a_killed_redis_restarts_on_the_same_port(procs: Any, tmp_path: Path) -> None:
    first = procs.start_redis(tmp_path)
    first.proc.kill()
    first.proc.wait(5)
    again = procs.start_redis(tmp_path, port=first.port)
    try:
        assert again.port == first.port
        assert _ping(again.port) == b"+PONG\r\n"
    finally:
        again.stop()


@LAUNCHERS
def test_a_redis_that_cannot_start_fails_fast(procs: Any, tmp_path: Path) -> None:
    t0 = time.monotonic()
    with pytest.raises(RuntimeError, match="did not accept connections"):
        procs.start_redis(tmp_path / "missing-dir")  # redis-server exits: it cannot chdir there
    assert time.monotonic() - t0 < 5
