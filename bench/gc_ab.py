"""CPU per request of one gateway process at wrk concurrency 8 and 128, per environment variant,
alternating A B A B (the collector-tuning measurement of `common/gc_policy.py`).

    python -m bench.gc_ab [--rounds 3] "default=FLEETGATE_GC_TUNING:0" "policy="

Each variant is `name=VAR:value;VAR:value`. The gateway runs `--workers 1` in front of
`bench/static_backend.py`; CPU is the gateway's own (utime + stime over the wrk window), so the
ratio c128 / c8 is what "CPU flat across concurrency" means, and it survives a loaded machine better
than req/s does.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Sequence
from pathlib import Path

from bench.procs import ROOT

LUA = (
    'wrk.method="POST"\nwrk.body=\'{"model":"%s","messages":[{"role":"user","content":"ping"}],'
    '"max_tokens":1}\'\nwrk.headers["Content-Type"]="application/json"\n'
)


def _cpu_s(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _wait(log: Path, pattern: str, timeout_s: float = 30.0) -> str:
    end = time.monotonic() + timeout_s
    while time.monotonic() < end:
        if m := re.search(pattern, log.read_text()):
            return m.group(1)
        time.sleep(0.1)
    raise SystemExit(f"no {pattern!r} in {log}: {log.read_text()[-400:]}")


def _variant(arg: str) -> tuple[str, dict[str, str]]:
    name, _, spec = arg.partition("=")
    return name, dict(kv.split(":", 1) for kv in spec.split(";") if kv)


def run_variant(
    backend: str, env: dict[str, str], workdir: Path, seconds: int
) -> list[tuple[int, float, float]]:
    """(concurrency, req/s, CPU ms/request) at c8 and c128 for one fresh gateway process."""
    log = workdir / "gateway.log"
    cmd = [sys.executable, "-m", "fleetgate", "gateway", "--pods", backend, "--port", "0", "--workers", "1"]
    with log.open("w") as out:
        gw = subprocess.Popen(
            [*cmd, "--log-level", "INFO"],
            cwd=ROOT,
            env={**os.environ, **env},
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    try:
        port = _wait(log, r"listening on http://127\.0\.0\.1:(\d+)")
        time.sleep(2)  # the first scrapes land
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/v1/models", timeout=10) as r:
            model = json.load(r)["data"][0]["id"]
        lua = workdir / "post.lua"
        lua.write_text(LUA % model)
        rows = []
        for c in (8, 128):
            c0 = _cpu_s(gw.pid)
            out_s = subprocess.run(
                [
                    "wrk",
                    "-t1",
                    f"-c{c}",
                    f"-d{seconds}s",
                    "-s",
                    str(lua),
                    f"http://127.0.0.1:{port}/v1/chat/completions",
                ],
                capture_output=True,
                text=True,
                timeout=seconds + 30,
                check=True,
            ).stdout
            spent = _cpu_s(gw.pid) - c0
            m = re.search(r"(\d+) requests in", out_s)
            n = int(m.group(1)) if m else 0
            rows.append((c, n / seconds, spent / n * 1e3 if n else float("nan")))
        return rows
    finally:
        gw.terminate()
        gw.wait(15)


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.gc_ab", description=__doc__.splitlines()[0])
    ap.add_argument("variants", nargs="+", help="name=VAR:value;VAR:value")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--seconds", type=int, default=5)
    args = ap.parse_args(argv)
    variants = dict(_variant(a) for a in args.variants)
    with tempfile.TemporaryDirectory() as tmp:
        workdir = Path(tmp)
        blog = workdir / "backend.log"
        with blog.open("w") as out:
            backend = subprocess.Popen(
                [sys.executable, "-m", "bench.static_backend", "--host", "127.0.0.1", "--port", "0"],
                cwd=ROOT,
                stdout=out,
                stderr=subprocess.STDOUT,
            )
        try:
            url = "http://127.0.0.1:" + _wait(blog, r"127\.0\.0\.1:(\d+)")
            print(f"load average at start: {os.getloadavg()[0]:.2f}")
            for _ in range(args.rounds):
                for name, env in variants.items():
                    rows = run_variant(url, env, workdir, args.seconds)
                    cells = " | ".join(f"c{c}: {rps:,.0f} req/s, {ms:.3f} ms" for c, rps, ms in rows)
                    print(f"{name}: {cells} | c128/c8 CPU {rows[1][2] / rows[0][2]:.2f}", flush=True)
        finally:
            backend.terminate()
            backend.wait(15)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
