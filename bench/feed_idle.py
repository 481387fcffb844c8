"""What the worker feed costs an idle gateway: CPU of each of its processes with N pods, W workers.

`python -m bench.feed_idle [--pods 1000] [--workers 1,2] [--seconds 10]`: simulated pods' `/metrics`
(`modelsim.metrics_ports`, the scale bench's pods) behind one `fleetgate gateway --workers W`; after
a warm-up (every pod discovered and scraped, the GC policy's first freeze) each process's CPU share
over a window in which no request arrives. With `--workers 1` there is no feed: the gateway process's
share is then its scrapes alone, so the difference to W > 1 is the feed's cost in the gateway
process, and a worker's whole share is the feed's cost in that worker (it serves nothing here).
Figures are CPU time from /proc, so they carry over from a loaded machine.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path

from bench import procs
from bench.procstat import cpu_seconds, descendants
from bench.scale_scrape import SimProcesses


def idle_shares(
    ports: list[int], workers: int, seconds: float, warmup_s: float, log: Path
) -> dict[str, float]:
    """% of one core per gateway process ("gateway", "worker 1", ...) over `seconds` of no traffic."""
    port = procs.free_port()
    urls = ",".join(f"http://127.0.0.1:{p}" for p in ports)
    cmd = [sys.executable, "-m", "fleetgate", "gateway", "--pods", urls, "--workers", str(workers)]
    cmd += ["--port", str(port), "--log-level", "warning"]
    with log.open("wb") as out:
        gw = subprocess.Popen(
            cmd, stdout=out, stderr=subprocess.STDOUT, cwd=procs.ROOT, start_new_session=True
        )
    try:
        procs.wait_http(f"http://127.0.0.1:{port}/ready", 60, gw)
        time.sleep(warmup_s)  # the window must start after the warm-up's scrapes and first freeze
        pids = [gw.pid, *sorted(set(descendants([gw.pid])) - {gw.pid})]
        before, t0 = {p: cpu_seconds([p]) for p in pids}, time.monotonic()
        time.sleep(seconds)
        after, dt = {p: cpu_seconds([p]) for p in pids}, time.monotonic() - t0
        names = ["gateway", *(f"worker {i}" for i in range(1, len(pids)))]
        return {n: round((after[p] - before[p]) / dt * 100, 1) for n, p in zip(names, pids, strict=True)}
    finally:
        os.killpg(gw.pid, signal.SIGTERM)
        gw.wait(30)


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.feed_idle", description=__doc__.split("\n")[0])
    ap.add_argument("--pods", type=int, default=1000)
    ap.add_argument("--workers", default="1,2", help="comma-separated worker counts, run in turn")
    ap.add_argument("--seconds", type=float, default=10.0, help="the measured idle window")
    ap.add_argument("--warmup", type=float, default=10.0, help="seconds after /ready before the window")
    args = ap.parse_args(argv)
    log = Path(os.environ.get("TMPDIR", "/tmp")) / "fleetgate-feed-idle.log"
    with SimProcesses(args.pods) as ports:
        for w in (int(x) for x in args.workers.split(",")):
            shares = idle_shares(ports, w, args.seconds, args.warmup, log)
            print(json.dumps({"pods": args.pods, "workers": w, "cpu_pct_of_a_core": shares}), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
