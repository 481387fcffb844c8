"""CPU per request of one gateway process at wrk concurrency 8 and 128, per environment variant,
alternating A B A B (the collector-policy measurement of `common/gc_policy.py`).

    python -m bench.gc_ab [--rounds 3] "default=FLEETGATE_GC_TUNING:0" "policy="

Each variant is `name=VAR:value;VAR:value`. The gateway runs `--workers 1` in front of
`bench/static_backend.py`; CPU is the gateway's own over the wrk window (`procstat.CpuMeter`), so
the ratio c128 / c8 is what "CPU flat across concurrency" means, and it survives a loaded machine
better than req/s does. Processes, wrk and the request are the throughput bench's own.
"""

from __future__ import annotations

import argparse
import os
import tempfile
from collections.abc import Sequence
from pathlib import Path

from bench import procstat, wrk
from bench import throughput_fronts as fronts
from bench.static_backend import MODEL

CONCURRENCIES = (8, 128)
BODY = {"model": MODEL, "messages": [{"role": "user", "content": "ping"}], "max_tokens": 1}


def _variant(arg: str) -> tuple[str, dict[str, str]]:
    name, _, spec = arg.partition("=")
    return name, dict(kv.split(":", 1) for kv in spec.split(";") if kv)


def run_variant(
    backend: str, env: dict[str, str], workdir: Path, seconds: int
) -> list[tuple[int, float, float]]:
    """(concurrency, req/s, CPU ms/request) at each of CONCURRENCIES for one fresh gateway process."""
    launch = fronts.Launcher(workdir)
    try:
        cmd = fronts._fleetgate("gateway", "--pods", backend, "--port", "0", "--workers", "1")
        proc, log = launch.start("gateway", cmd, env)
        port = fronts.wait_log(proc, log, fronts._GATEWAY_PORT)
        front = fronts._ready(fronts.Front("gateway", f"http://127.0.0.1:{port}", [proc.pid]), proc, log)
        script = workdir / "post.lua"
        script.write_text(wrk.lua_script(BODY))
        cpu = procstat.CpuMeter(front.pids)
        rows = []
        for c in CONCURRENCIES:
            cpu.start()
            res = wrk.run(front.url + "/v1/chat/completions", script, c, seconds, threads=1)
            spent = cpu.stop()
            rows.append((c, res.ok_rps, spent / res.requests * 1e3 if res.requests else float("nan")))
        return rows
    finally:
        launch.close()


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.gc_ab", description=__doc__.splitlines()[0])
    ap.add_argument("variants", nargs="+", help="name=VAR:value;VAR:value")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--seconds", type=int, default=5)
    args = ap.parse_args(argv)
    variants = dict(_variant(a) for a in args.variants)
    wrk.ensure_installed()
    with tempfile.TemporaryDirectory() as tmp:
        workdir = Path(tmp)
        launch = fronts.Launcher(workdir)
        try:
            backend = fronts.static_backend(launch).url
            print(f"load average at start: {os.getloadavg()[0]:.2f}")
            for rnd in range(args.rounds):
                for name, env in variants.items():
                    run_dir = workdir / f"{name}-{rnd}"
                    run_dir.mkdir()
                    rows = run_variant(backend, env, run_dir, args.seconds)
                    cells = " | ".join(f"c{c}: {rps:,.0f} req/s, {ms:.3f} ms" for c, rps, ms in rows)
                    print(f"{name}: {cells} | c128/c8 CPU {rows[1][2] / rows[0][2]:.2f}", flush=True)
        finally:
            launch.close()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
