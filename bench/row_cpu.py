"""CPU per request (or per stream) of each process of one throughput-bench row: the A/B tool.

`fleetgate bench throughput` reports a row's whole process tree; a trim of one tier shows better
per process, and in alternating runs of two checkouts (the machine's noise is larger than most
trims). Each run starts the static backend and the row exactly as the throughput bench does, then
either drives wrk at concurrency 64 (`--mode wrk`) or rounds of concurrent 50-chunk streams
(`--mode streams`), reading each process's CPU from /proc around the measured window.

    python -m bench.row_cpu global --mode wrk --seconds 8
    # A/B: run it from two checkouts in turn, e.g. with a worktree of the older commit:
    git worktree add /tmp/before <rev>
    for i in 1 2 3; do (cd /tmp/before && PYTHONPATH=. python -m bench.row_cpu global); \
                       python -m bench.row_cpu global; done
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path

from bench import procstat, rawclient, throughput_fronts, wrk
from bench.throughput import LOCAL, ROWS, chat_body, start_front

CHUNKS = 50


def _processes(roots: list[int]) -> dict[int, str]:
    """Each process of the row (its roots and their children), named by its command line."""
    names = {}
    for pid in sorted(procstat.descendants(roots)):
        try:
            argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        words = [a.decode(errors="replace") for a in argv if a]
        module = words[words.index("-m") + 1] if "-m" in words else Path(words[0]).name if words else "?"
        sub = words[words.index("-m") + 2] if "-m" in words and len(words) > words.index("-m") + 2 else ""
        names[pid] = f"{module} {sub}".strip() + f" [{pid}]"
    return names


def measure(key: str, mode: str, seconds: float, streams: int, rounds: int) -> dict[str, object]:
    with tempfile.TemporaryDirectory(prefix="fleetgate-row-cpu-") as tmp:
        workdir = Path(tmp)
        backend = throughput_fronts.Launcher(workdir)
        row = throughput_fronts.Launcher(workdir / "row")
        (workdir / "row").mkdir()
        try:
            cmd = [
                sys.executable, "-m", "bench.static_backend", "--host", LOCAL, "--port", "0",
                "--chunks", str(CHUNKS), "--interval-ms", "10",
            ]  # fmt: skip
            proc, log = backend.start("backend", cmd)
            port = throughput_fronts.wait_log(
                proc, log, r"static backend listening on http://127\.0\.0\.1:(\d+)"
            )
            direct = throughput_fronts.Front("direct", f"http://{LOCAL}:{port}")
            throughput_fronts.wait_until(
                "backend", lambda: throughput_fronts.completion_ok(direct), proc, log, 30
            )
            front = start_front(key, row, direct.url, 2)
            names = _processes(front.pids)
            path = "/v1/chat/completions"
            if mode == "wrk":
                script = workdir / "post.lua"
                script.write_text(wrk.lua_script(chat_body(), front.headers))
                wrk.run(front.url + path, script, 64, 3)  # warm
                before = {p: procstat.cpu_seconds({p}) for p in names}
                res = wrk.run(front.url + path, script, 64, seconds)
                after = {p: procstat.cpu_seconds({p}) for p in names}
                units = res.requests
                extra: dict[str, object] = {"rps": round(res.ok_rps), "errors": res.errors}
            else:
                raw = rawclient.build_request(
                    LOCAL, front.port, path, chat_body(True, max_tokens=CHUNKS), front.headers
                )
                asyncio.run(rawclient.concurrent_streams(LOCAL, front.port, raw, 100, CHUNKS, 30))  # warm
                before = {p: procstat.cpu_seconds({p}) for p in names}
                ttfb: list[float] = []
                errors = 0
                for _ in range(rounds):
                    sr = asyncio.run(
                        rawclient.concurrent_streams(LOCAL, front.port, raw, streams, CHUNKS, 30)
                    )
                    ttfb += sr.ttfb_s
                    errors += sum(sr.errors.values())
                after = {p: procstat.cpu_seconds({p}) for p in names}
                ttfb.sort()
                units = streams * rounds
                extra = {
                    "errors": errors,
                    "ttfb_p99_ms": round(ttfb[int(len(ttfb) * 0.99)] * 1000) if ttfb else None,
                }
        finally:
            row.close()
            backend.close()
    per = {names[p]: round((after[p] - before[p]) / max(1, units) * 1000, 3) for p in names}
    unit = "ms_per_request" if mode == "wrk" else "ms_per_stream"
    return {"row": key, "mode": mode, **extra, unit: per, "total": round(sum(per.values()), 3)}


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.row_cpu", description=__doc__.splitlines()[0])
    ap.add_argument("row", choices=[r for r in ROWS if r not in ("direct", "sglang", "vllm", "litellm")])
    ap.add_argument("--mode", choices=("wrk", "streams"), default="wrk")
    ap.add_argument("--seconds", type=float, default=8.0, help="wrk window at c64")
    ap.add_argument("--streams", type=int, default=1000, help="concurrent streams per round")
    ap.add_argument("--rounds", type=int, default=2, help="rounds of streams")
    args = ap.parse_args(argv)
    wrk.ensure_installed()
    rawclient.raise_nofile()
    print(json.dumps(measure(args.row, args.mode, args.seconds, args.streams, args.rounds)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
