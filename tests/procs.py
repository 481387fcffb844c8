"""The tests' one process launcher: `fleetgate <command>` as a child process, redis-server, and ports.

Ports: a server in this repo binds port 0 and logs (or returns) the address it got; Envoy is started
on port 0 too. `refusing_port()` holds a bound socket that never listens, for "nothing answers
there" without a race. Only a server that must be told its port before it runs and cannot be handed
a socket (redis-server restarted on the same address, a port-preference feature under test) gets
`free_port()`, and `start_redis` retries on the rare collision.
"""

from __future__ import annotations

import contextlib
import os
import re
import socket
import subprocess
import sys
import time
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

from fleetgate.redis_server import RedisServer as RedisServer  # re-exported: one launcher
from fleetgate.redis_server import start_redis as start_redis

ROOT = Path(__file__).resolve().parents[1]


def fleetgate(
    command: str, *args: str, python: str | Path | None = None, env: Mapping[str, str] | None = None
) -> subprocess.Popen[str]:
    """Started from the repo root with both output streams piped as unbuffered text, so a test can
    read each bound-address line the moment it is logged. `python` runs it in another environment
    (e.g. a venv with a plugin installed); this checkout still comes first on its path."""
    path = os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH", "")) if p)
    return subprocess.Popen(
        [str(python or sys.executable), "-m", "fleetgate", command, *args],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONUNBUFFERED": "1", "PYTHONPATH": path, **(env or {})},
    )


def read_until(stream: Any, pattern: str, timeout_s: float = 30.0) -> tuple[re.Match[str], list[str]]:
    """Read lines from a child's pipe until one matches `pattern`; the match and the lines read.

    Raises AssertionError (with what was read) at EOF or after `timeout_s`.
    """
    rx = re.compile(pattern)
    lines: list[str] = []
    deadline = time.monotonic() + timeout_s
    readline = stream.readline
    while time.monotonic() < deadline:
        line = readline()
        if not line:
            break
        lines.append(line)
        if m := rx.search(line):
            return m, lines
    raise AssertionError(f"no line matching {pattern!r} in: {''.join(lines)[-2000:]}")


def stop(proc: subprocess.Popen[Any], timeout_s: float = 15.0) -> int:
    """SIGTERM, then kill if it does not exit in time; its exit code."""
    if proc.poll() is None:
        proc.terminate()
        try:
            return proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            proc.kill()
    return proc.wait()


def free_port() -> int:
    """A loopback port the kernel just handed out (released again: only for servers that must be told
    a port up front and cannot take a socket; see the module docstring)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextlib.contextmanager
def refusing_port() -> Iterator[int]:
    """A loopback port that is bound (so nobody else gets it) but never listens: connects are refused."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        yield int(s.getsockname()[1])
