"""`fleetgate <command>` as a real child process, for tests of what the CLI does as a process."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
from collections.abc import Mapping
from pathlib import Path

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


def read_until(stream: object, pattern: str, timeout_s: float = 30.0) -> tuple[re.Match[str], list[str]]:
    """Read lines from a child's pipe until one matches `pattern`; the match and the lines read.

    Raises AssertionError (with what was read) at EOF or after `timeout_s`.
    """
    rx = re.compile(pattern)
    lines: list[str] = []
    deadline = time.monotonic() + timeout_s
    readline = stream.readline  # type: ignore[attr-defined]
    while time.monotonic() < deadline:
        line = readline()
        if not line:
            break
        lines.append(line)
        if m := rx.search(line):
            return m, lines
    raise AssertionError(f"no line matching {pattern!r} in: {''.join(lines)[-2000:]}")


def stop(proc: subprocess.Popen[str], timeout_s: float = 15.0) -> int:
    """SIGTERM, then kill if it does not exit in time; its exit code."""
    if proc.poll() is None:
        proc.terminate()
        try:
            return proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            proc.kill()
    return proc.wait()
