"""`fleetgate demo` as a real subprocess: its output lines, its child processes, a bounded stop."""

from __future__ import annotations

import os
import queue
import re
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
ENDPOINT_LINE = re.compile(r"^global endpoint: (http://127\.0\.0\.1:(\d+))$")
KEY_LINE = re.compile(r"^api key: (sk-\S+)$")


def children_of(pid: int) -> list[int]:
    """Direct children, from /proc (every thread's `children` list)."""
    out: list[int] = []
    try:
        tasks = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return out
    for tid in tasks:
        try:
            out += [int(x) for x in Path(f"/proc/{pid}/task/{tid}/children").read_text().split()]
        except OSError:
            continue
    return sorted(set(out))


def cmdline(pid: int) -> list[str]:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace").split("\0")
    except OSError:
        return []


def alive(pid: int) -> bool:
    """Exists and is not a zombie waiting to be reaped."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


class DemoProcess:
    def __init__(self, *args: str, tmp: Path) -> None:
        self.stderr_path = tmp / "demo.stderr"
        self._stderr = self.stderr_path.open("wb")
        env = dict(os.environ, PYTHONUNBUFFERED="1")
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "fleetgate", "demo", *args],
            cwd=ROOT,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=self._stderr,
        )
        self.lines: queue.Queue[str | None] = queue.Queue()
        self.seen: list[str] = []
        threading.Thread(target=self._pump, daemon=True).start()

    def _pump(self) -> None:
        assert self.proc.stdout is not None
        for raw in self.proc.stdout:
            self.lines.put(raw.decode(errors="replace").rstrip("\n"))
        self.lines.put(None)

    def next_line(self, timeout_s: float) -> str:
        try:
            line = self.lines.get(timeout=timeout_s)
        except queue.Empty:
            raise AssertionError(f"no output line within {timeout_s} s; stderr: {self.stderr()}") from None
        if line is None:
            raise AssertionError(f"demo exited ({self.proc.wait()}) early; stderr: {self.stderr()}")
        self.seen.append(line)
        return line

    def wait_for_line(self, pattern: str, timeout_s: float) -> str:
        deadline = time.monotonic() + timeout_s
        while True:
            line = self.next_line(max(0.1, deadline - time.monotonic()))
            if re.search(pattern, line):
                return line

    def stderr(self) -> str:
        return self.stderr_path.read_text(errors="replace")[-3000:]

    def sim_children(self) -> dict[str, int]:
        """Cluster id -> pid of its `fleetgate sim` child."""
        out: dict[str, int] = {}
        for pid in children_of(self.proc.pid):
            argv = cmdline(pid)
            if "sim" in argv and "--pod-spec" in argv:
                spec = Path(argv[argv.index("--pod-spec") + 1]).name
                out[spec.removesuffix(".pods.yaml")] = pid
        return out

    def stop(self, sig: signal.Signals, timeout_s: float) -> int:
        self.proc.send_signal(sig)
        return self.wait(timeout_s)

    def wait(self, timeout_s: float) -> int:
        try:
            return self.proc.wait(timeout=timeout_s)
        finally:
            self._stderr.close()

    def kill_all(self) -> None:
        """Test cleanup after a failure: the demo and whatever it left."""
        kids = children_of(self.proc.pid)
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(timeout=10)
        for pid in kids:
            if alive(pid):
                os.kill(pid, signal.SIGKILL)
        self._stderr.close()


def wait_gone(pids: list[int], timeout_s: float) -> list[int]:
    """Pids still alive after `timeout_s` (orphans are reaped by init shortly after the demo exits)."""
    deadline = time.monotonic() + timeout_s
    while True:
        left = [p for p in pids if alive(p)]
        if not left or time.monotonic() > deadline:
            return left
        time.sleep(0.1)
