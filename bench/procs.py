"""Process plumbing shared by the benches: every server runs as its own `python -m fleetgate` process
(and Redis as a redis-server process).

One copy of the helpers that global_bench, proxy_overhead, routing and the tests' Redis fixture used
to carry each, so a fix to how a bench starts, reads, waits for or stops a server reaches every bench.
"""

from __future__ import annotations

import contextlib
import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import IO, Any

import httpx

from fleetgate.redis_server import RedisServer as RedisServer  # re-exported: one launcher
from fleetgate.redis_server import start_redis as start_redis

ROOT = Path(__file__).resolve().parents[1]


def spawn(*args: str) -> subprocess.Popen[str]:
    """`python -m fleetgate <args>` from the repo root, both pipes captured as text.

    Unbuffered so the readiness lines (`listening on ...`) reach the pipe as soon as they are printed.
    """
    return subprocess.Popen(
        [sys.executable, "-m", "fleetgate", *args],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )


def expect(stream: IO[str] | None, pattern: str, count: int, timeout: float = 30.0) -> list[str]:
    """Read lines until `count` of them match `pattern`; return each match's group 1.

    The servers announce their bound addresses this way (they start on port 0). Raises RuntimeError on
    end of stream (the process exited) or when the deadline passes; the deadline is checked between
    lines, so a process that stays silent without exiting blocks the read.
    """
    if stream is None:
        raise RuntimeError(f"expected {count} x {pattern!r} from a pipe that was not captured")
    found: list[str] = []
    rx = re.compile(pattern)
    deadline = time.monotonic() + timeout
    while len(found) < count and time.monotonic() < deadline:
        line = stream.readline()
        if not line:
            break
        if m := rx.search(line):
            found.append(m.group(1))
    if len(found) < count:
        raise RuntimeError(f"expected {count} x {pattern!r}, got {found}")
    return found


SIM_LISTENING = r"^modelsim pod \d+ listening on (http://\S+)"  # `fleetgate sim`'s line per pod, in pod order


def expect_in_file(
    path: Path, pattern: str, count: int, proc: subprocess.Popen[Any], timeout: float = 30.0
) -> list[str]:
    """`expect` for a process whose output goes to a file (`path`), not a pipe: each match's group 1,
    in the order printed, once `count` complete lines match. The servers bind port 0 and print where
    they listen, so a block of free ports never has to be guessed (after a load test, thousands of
    loopback ports sit in TIME_WAIT and a guessed block is often taken). RuntimeError when `proc`
    exits first (after a last read: what it wrote before exiting counts, an unended last line too) or
    the deadline passes."""
    rx = re.compile(pattern)
    deadline = time.monotonic() + timeout
    found: list[str] = []
    with contextlib.ExitStack() as files:
        reader: IO[str] | None = None
        partial = ""  # a line not yet ended: its match could be cut short

        def read_new() -> None:
            nonlocal reader, partial
            if reader is None:
                if not path.exists():
                    return
                reader = files.enter_context(path.open(errors="replace"))
            *lines, partial = (partial + reader.read()).split("\n")
            found.extend(m.group(1) for line in lines if (m := rx.search(line)))

        while True:
            exited = proc.poll() is not None  # polled before the read: a line written before the exit counts
            read_new()
            if exited and (m := rx.search(partial)):  # its last line, unended: nothing more will come
                found.append(m.group(1))
            if len(found) >= count:
                return found[:count]
            if exited:
                raise RuntimeError(
                    f"exited with {proc.returncode} after {len(found)} of {count} x {pattern!r}"
                )
            if time.monotonic() > deadline:
                raise RuntimeError(f"{len(found)} of {count} x {pattern!r} after {timeout:.0f} s")
            time.sleep(0.02)  # the next poll of the file


def _drain(pipe: Iterable[Any]) -> None:
    for _line in pipe:
        pass


def drain_in_background(*pipes: IO[Any] | None) -> None:
    """Read the pipes to EOF on daemon threads so a chatty server never blocks on a full pipe."""
    for pipe in pipes:
        if pipe is not None:
            threading.Thread(target=_drain, args=(pipe,), daemon=True).start()


def stop(p: subprocess.Popen[Any], sig: int = signal.SIGTERM, timeout: float = 10.0) -> None:
    """Send `sig` (a graceful SIGTERM by default) and wait; SIGKILL what is still up after `timeout` s."""
    if p.poll() is None:
        p.send_signal(sig)
        try:
            p.wait(timeout)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()


def free_port() -> int:
    """A loopback port the kernel just handed out, for servers that need a port named up front."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def wait_http(
    url: str,
    timeout_s: float,
    proc: subprocess.Popen[Any],
    ok: int = 200,
    check: Callable[[httpx.Response], bool] | None = None,
) -> None:
    """Poll GET `url` every 0.1 s until it answers `ok` (and `check` holds); fail fast if `proc` exits."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"process for {url} exited with {proc.returncode}")
        with contextlib.suppress(httpx.HTTPError, ValueError):
            resp = httpx.get(url, timeout=1.0)
            if resp.status_code == ok and (check is None or check(resp)):
                return
        time.sleep(0.1)
    raise RuntimeError(f"{url} not ready after {timeout_s}s")
