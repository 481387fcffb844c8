"""A throw-away redis-server on loopback, persistence off: the Redis the benches and the tests run
Tier 2's rate limits against (a real server, never a mock).

One launcher for both: `bench/procs.py` and `tests/procs.py` re-export it, so the benches and the
tests' Redis fixture start, wait for and stop Redis the same way (and neither imports the other).
"""

from __future__ import annotations

import shutil
import signal
import socket
import subprocess
import time
from pathlib import Path


class RedisServer:
    """A running redis-server child: its port, process and client URL."""

    def __init__(self, port: int, proc: subprocess.Popen[bytes]) -> None:
        self.port = port
        self.proc = proc
        self.url = f"redis://127.0.0.1:{port}/0"

    def stop(self, timeout_s: float = 15.0) -> None:
        """SIGTERM, then SIGKILL if it is still up after `timeout_s`."""
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=timeout_s)
            except subprocess.TimeoutExpired:
                self.proc.kill()
        self.proc.wait()


def _free_port() -> int:
    # redis-server must be told its port (it cannot take a bound socket): a collision is retried below
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def start_redis(data_dir: Path, port: int | None = None, timeout_s: float = 10.0) -> RedisServer:
    """Start redis-server on loopback (on `port`, e.g. to restart one on the same address) and wait
    until it accepts connections. Without `port`, a collision on the port it picked is retried.

    Raises FileNotFoundError when redis-server is not installed (callers skip), RuntimeError when it
    exits or does not accept within `timeout_s`.
    """
    exe = shutil.which("redis-server")
    if exe is None:
        raise FileNotFoundError("redis-server not installed")
    for attempt in range(3):
        chosen = port or _free_port()
        argv = [exe, "--port", str(chosen), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"]
        proc = subprocess.Popen(
            [*argv, "--dir", str(data_dir)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
        )
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline and proc.poll() is None:
            try:
                with socket.create_connection(("127.0.0.1", chosen), timeout=0.2):
                    return RedisServer(chosen, proc)
            except OSError:
                time.sleep(0.05)
        if proc.poll() is None:
            proc.send_signal(signal.SIGKILL)
        proc.wait()
        if port is not None or attempt == 2:
            break
    raise RuntimeError(
        f"redis-server did not accept connections on port {chosen} (exit code {proc.returncode})"
    )
