"""Shared fixtures: real redis-server on loopback, free ports."""

from __future__ import annotations

import shutil
import socket
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture
def unused_port() -> int:
    return free_port()


class RedisServer:
    def __init__(self, port: int, proc: subprocess.Popen[bytes]) -> None:
        self.port = port
        self.proc = proc
        self.url = f"redis://127.0.0.1:{port}/0"

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            self.proc.wait(timeout=10)


def start_redis(tmp: Path, port: int | None = None) -> RedisServer:
    """Start redis-server on loopback (on `port`, e.g. to restart one a test killed)."""
    exe = shutil.which("redis-server")
    if exe is None:
        pytest.skip("redis-server not installed (make test installs it)")
    port = port or free_port()
    proc = subprocess.Popen(
        [
            exe,
            "--port",
            str(port),
            "--bind",
            "127.0.0.1",
            "--save",
            "",
            "--appendonly",
            "no",
            "--dir",
            str(tmp),
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.2):
                return RedisServer(port, proc)
        except OSError:
            time.sleep(0.05)
    proc.kill()
    raise RuntimeError("redis-server did not start")


@pytest.fixture
def redis_server(tmp_path: Path) -> Iterator[RedisServer]:
    srv = start_redis(tmp_path)
    yield srv
    srv.stop()
