"""wrk as the closed-loop load generator of the throughput bench: its Lua POST script and its output.

wrk (C, epoll) drives tens of thousands of requests/s from one core, so at concurrency 64 the router
in front of the backend is what saturates, not the client. wrk prints a text report; `parse` turns
it into numbers and fails loudly on a report it does not recognise rather than reporting zeros.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

WRK = shutil.which("wrk") or "/usr/bin/wrk"


def ensure_installed() -> str:
    """wrk's path, installing the Debian package first when it is missing and we may (root + apt-get).

    A machine without wrk would otherwise fail every row minutes into a run; this fails (or mends)
    before any process starts, and says what to do.
    """
    global WRK
    found = shutil.which("wrk")
    if found is None and os.geteuid() == 0 and shutil.which("apt-get"):
        print("[bench] installing wrk (Debian package)", file=sys.stderr)
        env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
        for cmd in (["apt-get", "update", "-qq"], ["apt-get", "install", "-y", "-qq", "wrk"]):
            subprocess.run(cmd, env=env, check=False, stdout=subprocess.DEVNULL, timeout=600)
        found = shutil.which("wrk")
    if found is None:
        raise SystemExit("wrk is not installed and could not be installed here: apt-get install wrk")
    WRK = found
    return found


_UNITS_S = {"us": 1e-6, "ms": 1e-3, "s": 1.0, "m": 60.0, "h": 3600.0}


def lua_script(body: Mapping[str, Any], headers: Mapping[str, str] | None = None) -> str:
    """A wrk script that sends every request as this JSON POST (Lua long strings need no escaping)."""
    payload = json.dumps(body, separators=(",", ":"))
    if "]==]" in payload:
        raise ValueError("body contains the Lua long-string terminator")
    lines = ['wrk.method = "POST"', f"wrk.body = [==[{payload}]==]"]
    for k, v in {"Content-Type": "application/json", **(headers or {})}.items():
        lines.append(f'wrk.headers["{k}"] = [==[{v}]==]')
    return "\n".join(lines) + "\n"


@dataclass(slots=True)
class WrkResult:
    requests: int
    seconds: float
    non_2xx: int
    socket_errors: dict[str, int] = field(default_factory=dict)  # connect/read/write/timeout
    latency_ms: dict[int, float] = field(default_factory=dict)  # percentile -> ms

    @property
    def errors(self) -> int:
        return self.non_2xx + sum(self.socket_errors.values())

    @property
    def ok_rps(self) -> float:
        """Successful responses per second (wrk's own Requests/sec also counts non-2xx answers)."""
        return (self.requests - self.non_2xx) / self.seconds if self.seconds > 0 else 0.0


def _seconds(value: str, unit: str) -> float:
    return float(value) * _UNITS_S[unit]


def parse(text: str) -> WrkResult:
    """wrk 4's report (run with `--latency`) as numbers; ValueError when the summary line is missing."""
    m = re.search(r"(\d+) requests in ([\d.]+)(us|ms|s|m|h)\b", text)
    if m is None:
        raise ValueError(f"not a wrk report: {text[-300:]!r}")
    res = WrkResult(int(m.group(1)), _seconds(m.group(2), m.group(3)), 0)
    if n := re.search(r"Non-2xx or 3xx responses: (\d+)", text):
        res.non_2xx = int(n.group(1))
    if s := re.search(r"Socket errors: connect (\d+), read (\d+), write (\d+), timeout (\d+)", text):
        res.socket_errors = dict(
            zip(("connect", "read", "write", "timeout"), map(int, s.groups()), strict=True)
        )
    dist = text.split("Latency Distribution", 1)
    if len(dist) == 2:
        for p, v, u in re.findall(r"^\s+(\d+(?:\.\d+)?)%\s+([\d.]+)(us|ms|s|m)\s*$", dist[1], re.M):
            res.latency_ms[round(float(p))] = _seconds(v, u) * 1e3
    return res


def run(
    url: str, script: Path, connections: int, seconds: float, timeout_s: float = 10.0, threads: int = 2
) -> WrkResult:
    """One wrk run (bounded: wrk stops after `seconds`; the process is killed if it hangs past that)."""
    cmd = [
        WRK,
        f"-t{max(1, min(threads, connections))}",
        f"-c{connections}",
        f"-d{max(1, round(seconds))}s",
        f"--timeout={max(1, round(timeout_s))}s",
        "--latency",
        "-s",
        str(script),
        url,
    ]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=seconds + timeout_s + 30)
    if proc.returncode != 0:
        raise RuntimeError(f"wrk exited {proc.returncode}: {proc.stderr.strip()[-300:]}")
    return parse(proc.stdout)
