"""What the worker feed costs an idle gateway: CPU of each of its processes with N pods, W workers.

`python -m bench.feed_idle [--pods 1000] [--workers 1,2] [--seconds 10]`: simulated pods' `/metrics`
(`modelsim.metrics_ports`, the scale bench's pods) behind one `fleetgate gateway --workers W`; after
a warm-up (every pod discovered and scraped, the GC policy's first freeze) each process's CPU share
over a window in which no request arrives. With `--workers 1` there is no feed: the gateway process's
share is then its scrapes alone, so the difference to W > 1 is the feed's cost in the gateway
process, and a worker's whole share is the feed's cost in that worker (it serves nothing here).
Figures are CPU time from /proc, so they carry over from a loaded machine.

`--in-process` times the feed's steps on the real classes instead, with pods carrying vLLM-like
metrics, labels and catalogs and the workers' connections faked: a quiet tick of the gateway
process, a tick in which every pod changed, a worker applying that whole-pool snapshot, and a
worker's per-tick report (ms of CPU each, medians of repeats).
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path

import msgspec

from bench import procs
from bench.procstat import cpu_seconds, descendants
from bench.scale_scrape import SimProcesses
from cluster_gateway.pool import Endpoint, EndpointPool, PodMetrics
from cluster_gateway.workers import publisher as pub
from cluster_gateway.workers.feed import Snapshot
from cluster_gateway.workers.replica import PoolReplica


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


class _Writer:
    def write(self, data: bytes) -> None:
        self.last = data

    def is_closing(self) -> bool:
        return False


def _cpu_ms(fn: Callable[[], object], repeats: int = 30) -> float:
    times = []
    for _ in range(repeats):
        t0 = time.process_time()
        fn()
        times.append((time.process_time() - t0) * 1e3)
    return round(statistics.median(times), 2)


def in_process(pods: int, workers: int) -> dict[str, float]:
    """ms of CPU per step of the feed for `pods` pods and `workers` workers (see the docstring)."""
    pool = EndpointPool()
    labels = {"app": "vllm", "model": "llama", "pool": "a"}
    pool.set_endpoints(
        Endpoint(f"pod-{i}", f"10.0.{i // 250}.{i % 250}", 8000, "vllm", labels) for i in range(pods)
    )

    def scrape_all() -> None:
        for p in pool.pods():
            m = PodMetrics("vllm", 2, 10, 0.4, frozenset({"a", "b"}), max_lora=4, scraped_at=time.monotonic())
            pool.record_scrape(p.name, m)

    scrape_all()
    for p in pool.pods():
        pool.set_catalog(p.name, ["llama"], {"a": "llama", "b": "llama", "c": "llama"})
    publisher = pub.PoolPublisher(pool, "/unused")
    conns = [_Writer() for _ in range(workers)]
    publisher._workers.extend(pub._Worker(w) for w in conns)  # type: ignore[arg-type]
    publisher.publish()  # the workers' first, whole-pool snapshots
    decode = msgspec.msgpack.Decoder(Snapshot).decode
    whole = decode(conns[0].last[4:])  # after the length prefix
    whole_frame = conns[0].last[4:]
    replica = PoolReplica(EndpointPool(), "/unused", 1, dict)
    replica.apply(whole)

    def changed_tick() -> None:
        scrape_all()
        publisher.publish()

    return {
        "quiet_tick_ms": _cpu_ms(publisher.publish),
        "every_pod_changed_tick_ms": round(_cpu_ms(changed_tick) - _cpu_ms(scrape_all), 2),
        "worker_applies_whole_pool_ms": _cpu_ms(lambda: replica.apply(decode(whole_frame))),
        "worker_report_ms": _cpu_ms(replica.report),
    }


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.feed_idle", description=__doc__.split("\n")[0])
    ap.add_argument("--pods", type=int, default=1000)
    ap.add_argument("--workers", default="1,2", help="comma-separated worker counts, run in turn")
    ap.add_argument("--seconds", type=float, default=10.0, help="the measured idle window")
    ap.add_argument("--warmup", type=float, default=10.0, help="seconds after /ready before the window")
    ap.add_argument("--in-process", action="store_true", help="time the feed's steps in this process")
    args = ap.parse_args(argv)
    if args.in_process:
        for w in (int(x) for x in args.workers.split(",")):
            print(json.dumps({"pods": args.pods, "workers": w, **in_process(args.pods, w)}), flush=True)
        return 0
    log = Path(os.environ.get("TMPDIR", "/tmp")) / "fleetgate-feed-idle.log"
    with SimProcesses(args.pods) as ports:
        for w in (int(x) for x in args.workers.split(",")):
            shares = idle_shares(ports, w, args.seconds, args.warmup, log)
            print(json.dumps({"pods": args.pods, "workers": w, "cpu_pct_of_a_core": shares}), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
