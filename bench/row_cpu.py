"""CPU per request (or per stream) of each process of one throughput-bench row: the A/B tool.

`fleetgate bench throughput` reports a row's whole process tree; a trim of one tier shows better
per process, and in alternating runs of two checkouts (the machine's noise is larger than most
trims). Each run starts the static backend and the row exactly as the throughput bench does (Envoy
with `--envoy-concurrency` workers, by default the bench's), then either drives wrk at concurrency
64 (`--mode wrk`; `--connections` for another), rounds of concurrent 50-chunk streams (`--mode
streams`, each round's TTFB p99, CPU and new connections too), or requests at a fixed low rate
(`--mode paced`, the throughput bench's added-latency column: what one request costs when it
arrives alone), reading each process's CPU from /proc around the measured window. `--mode paced`
first reads each process's idle CPU over the same window (background work: pool feed ticks,
scrapes) and reports CPU per request above it, with the added p50/p99 of the same run; the peers' rows work in this mode too, for comparison. Three more
rows exist only here: `floor-raw`, `floor-pool` and `floor-server`, the calibration proxies of
`bench.floor_proxies` (a lone request's cost below Fleetgate's request logic).

    python -m bench.row_cpu global --mode wrk --seconds 8
    python -m bench.row_cpu envoy-authz --mode wrk --connections 8   # the flatness check's low end
    python -m bench.row_cpu global --mode streams --streams 2000 --rounds 3 --warm-streams 500  # per round
    python -m bench.row_cpu embedded --mode paced --rate 20 --seconds 20
    python -m bench.row_cpu floor-server --mode paced --rate 20 --seconds 20
    # A/B: run it from two checkouts in turn, e.g. with a worktree of the older commit:
    git worktree add /tmp/before <rev>
    for i in 1 2 3; do (cd /tmp/before && PYTHONPATH=. python -m bench.row_cpu global); \
                       python -m bench.row_cpu global; done
"""

from __future__ import annotations

import argparse
import asyncio
import json
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

from bench import procstat, rawclient, throughput_fronts, wrk
from bench.throughput import LOCAL, ROWS, added, chat_body, envoy_workers, start_front

CHUNKS = 50
# rows of this tool only: the calibration proxies, same backend, same measurement
FLOOR_ROWS = {"floor-raw": "raw", "floor-pool": "pool", "floor-server": "server"}


def _start(
    key: str, launch: throughput_fronts.Launcher, backend: str, envoy_concurrency: int
) -> throughput_fronts.Front:
    if key in FLOOR_ROWS:
        return throughput_fronts.floor_proxy(launch, backend, FLOOR_ROWS[key])
    return start_front(key, launch, backend, envoy_concurrency)


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


def above_idle(idle_cpu_s: float, idle_s: float, busy_cpu_s: float, busy_s: float) -> float:
    """CPU seconds a busy window spent beyond the process's idle rate (its background work: pool
    feed ticks, scrapes), which at a low request rate is as large as the requests' own share."""
    return busy_cpu_s - idle_cpu_s * busy_s / idle_s if idle_s > 0 else busy_cpu_s


def _p99_ms(seconds: list[float]) -> int | None:
    return round(sorted(seconds)[int(len(seconds) * 0.99)] * 1000) if seconds else None


def _cpu(names: dict[int, str]) -> dict[int, float]:
    return {p: procstat.cpu_seconds({p}) for p in names}


def _paced(
    names: dict[int, str], port: int, direct_port: int, headers: dict[str, str], rate: float, seconds: float
) -> tuple[dict[int, float], int, dict[str, object]]:
    """Each process's CPU above its idle rate while the row serves `rate` requests/s (interleaved
    with as many sent to the backend directly, as the throughput bench does), and the added latency."""
    path = "/v1/chat/completions"
    raw = rawclient.build_request(LOCAL, port, path, chat_body(), headers)
    raw_direct = rawclient.build_request(LOCAL, direct_port, path, chat_body())
    targets = [(LOCAL, port, raw), (LOCAL, direct_port, raw_direct)]
    asyncio.run(rawclient.paced_alternating(targets, rate, 2.0, timeout_s=10.0))  # warm
    t0, before = time.monotonic(), _cpu(names)
    time.sleep(seconds)
    idle_s, idle = time.monotonic() - t0, _cpu(names)
    t1 = time.monotonic()
    run = asyncio.run(rawclient.paced_alternating(targets, rate, seconds, timeout_s=10.0, warm=0))
    busy_s, after = time.monotonic() - t1, _cpu(names)
    spent = {p: above_idle(idle[p] - before[p], idle_s, after[p] - idle[p], busy_s) for p in names}
    p50, p99 = added(run.latencies_s[0], run.latencies_s[1])
    extra: dict[str, object] = {
        "rate": rate,
        "errors": sum(run.errors[0].values()),
        "added_p50_p99_ms": [round(p50, 2), round(p99, 2)],
        "idle_cpu_pct": {names[p]: round((idle[p] - before[p]) / idle_s * 100, 2) for p in names},
    }
    return spent, len(run.latencies_s[0]) + sum(run.errors[0].values()), extra


def measure(
    key: str,
    mode: str,
    seconds: float,
    streams: int,
    rounds: int,
    rate: float = 20.0,
    connections: int = 64,
    envoy_concurrency: int | None = None,
    warm: int = 100,
) -> dict[str, object]:
    with tempfile.TemporaryDirectory(prefix="fleetgate-row-cpu-") as tmp:
        workdir = Path(tmp)
        backend = throughput_fronts.Launcher(workdir)
        row = throughput_fronts.Launcher(workdir / "row")
        (workdir / "row").mkdir()
        try:
            direct = throughput_fronts.static_backend(backend, chunks=CHUNKS, interval_ms=10)
            envoy = envoy_workers() if envoy_concurrency is None else envoy_concurrency
            front = _start(key, row, direct.url, envoy)
            names = _processes(front.pids)
            path = "/v1/chat/completions"
            extra: dict[str, object]
            if mode == "paced":
                spent, units, extra = _paced(names, front.port, direct.port, front.headers, rate, seconds)
                before = dict.fromkeys(names, 0.0)
                after = spent
            elif mode == "wrk":
                script = workdir / "post.lua"
                script.write_text(wrk.lua_script(chat_body(), front.headers))
                wrk.run(front.url + path, script, connections, 3)  # warm
                before = _cpu(names)
                res = wrk.run(front.url + path, script, connections, seconds)
                after = _cpu(names)
                units = res.requests
                extra = {"connections": connections, "rps": round(res.ok_rps), "errors": res.errors}
            else:
                raw = rawclient.build_request(
                    LOCAL, front.port, path, chat_body(True, max_tokens=CHUNKS), front.headers
                )
                asyncio.run(rawclient.concurrent_streams(LOCAL, front.port, raw, warm, CHUNKS, 30))
                calls_before = {p: procstat.io_calls(p) for p in names}
                before = _cpu(names)
                ttfb: list[float] = []
                errors = 0
                per_round = []
                for _ in range(rounds):
                    cpu0, opens0 = _cpu(names), procstat.tcp_active_opens()
                    sr = asyncio.run(
                        rawclient.concurrent_streams(LOCAL, front.port, raw, streams, CHUNKS, 30)
                    )
                    cpu1, opens1 = _cpu(names), procstat.tcp_active_opens()
                    ttfb += sr.ttfb_s
                    errors += sum(sr.errors.values())
                    per_round.append(
                        {
                            "ttfb_p99_ms": _p99_ms(sr.ttfb_s),
                            "ms_per_stream": {
                                names[p]: round((cpu1[p] - cpu0[p]) / streams * 1000, 3) for p in names
                            },
                            # connections the row's hops opened (not reused): the host's count less the client's
                            "new_connections": opens1 - opens0 - streams,
                        }
                    )
                after = _cpu(names)
                calls = {p: procstat.io_calls(p) for p in names}
                units = streams * rounds
                extra = {
                    "errors": errors,
                    "ttfb_p99_ms": _p99_ms(ttfb),
                    # a process's first storm at a size is its dearest (pools grow, the heap grows)
                    "rounds": per_round,
                    # reads and writes per stream of CHUNKS chunks: fewer reads than chunks when
                    # the relay lags and chunks queue up (the per-stream CPU then falls with load)
                    "reads_writes_per_stream": [
                        round(sum(calls[p][i] - calls_before[p][i] for p in names) / units, 1) for i in (0, 1)
                    ],
                    # per process: which hop relays chunk by chunk and which coalesces them
                    "reads_writes_per_stream_by_process": {
                        names[p]: [round((calls[p][i] - calls_before[p][i]) / units, 1) for i in (0, 1)]
                        for p in names
                    },
                }
        finally:
            row.close()
            backend.close()
    per = {names[p]: round((after[p] - before[p]) / max(1, units) * 1000, 3) for p in names}
    unit = "ms_per_stream" if mode == "streams" else "ms_per_request"
    return {"row": key, "mode": mode, **extra, unit: per, "total": round(sum(per.values()), 3)}


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.row_cpu", description=__doc__.splitlines()[0])
    ap.add_argument("row", choices=[*(r for r in ROWS if r != "direct"), *FLOOR_ROWS])
    ap.add_argument("--mode", choices=("wrk", "streams", "paced"), default="wrk")
    ap.add_argument(
        "--seconds", type=float, default=8.0, help="wrk window at c64; paced: idle and busy windows"
    )
    ap.add_argument("--rate", type=float, default=20.0, help="paced: requests/s to the row")
    ap.add_argument("--streams", type=int, default=1000, help="concurrent streams per round")
    ap.add_argument("--rounds", type=int, default=2, help="rounds of streams")
    ap.add_argument(
        "--warm-streams",
        type=int,
        default=100,
        help="streams: concurrent streams before the measured rounds (the throughput bench's storm follows 500)",
    )
    ap.add_argument(
        "--connections",
        type=int,
        default=64,
        help="wrk: concurrency (the bench's flatness check uses 8 and 128)",
    )
    ap.add_argument(
        "--envoy-concurrency",
        type=int,
        help="Envoy rows: worker threads (default: the bench's, half the cores)",
    )
    args = ap.parse_args(argv)
    wrk.ensure_installed()
    rawclient.raise_nofile()
    print(
        json.dumps(
            measure(
                args.row,
                args.mode,
                args.seconds,
                args.streams,
                args.rounds,
                rate=args.rate,
                connections=args.connections,
                envoy_concurrency=args.envoy_concurrency,
                warm=args.warm_streams,
            )
        )
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
