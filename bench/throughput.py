"""Data-plane capacity, every router side by side in one run: `fleetgate bench throughput [--quick]`.

One static OpenAI-style backend (bench/static_backend.py: tens of thousands of requests/s alone, SSE
streams of 50 chunks 10 ms apart) sits behind each router in turn, so the router is the bottleneck:
direct (the backend alone), the Fleetgate embedded proxy, Envoy + the Fleetgate ext_proc picker,
Envoy + the ext_authz picker, the Fleetgate global router + a gateway with its capacity agent (the
last two with the gateway's default serving processes, and with one: they share this box's cores),
and the peers installed in `.venv-peers` (sglang-router, vllm-router, LiteLLM proxy on its default
and with one worker per core; `--peers` installs the missing ones).
Per router, in this order (the 2,000-stream storm last, so a router it breaks spoils nothing else):
  * req/s at wrk concurrency 64 (non-streaming POSTs), and at 8 and 128 for the CPU-flatness check;
  * added p50/p99 at a fixed 20 req/s, open loop, interleaved with the same requests sent directly;
  * a 220 KB prompt, sequential;
  * 500 and then 2,000 concurrent streams (raw-socket client, each stream bounded by a timeout):
    errors by kind, time to first byte p50/p99;
  * CPU ms per request / per stream of the router's processes (utime+stime from /proc, the whole
    process tree, Envoy included, backend excluded), and their peak RSS;
  * the same-run ratios to sglang-router's: req/s at c64, 2,000-stream TTFB p99, added p50.
A full run repeats every row twice in alternating order and reports medians (ranges for error
counts). Writes bench/results/throughput.md (throughput_quick.md with --quick; `--out` overrides);
a router that fails to start is a FAILED row and its log is kept next to the table.
"""

from __future__ import annotations

import argparse
import asyncio
import math
import os
import shutil
import signal
import statistics
import sys
import tempfile
import time
import traceback
from collections import Counter
from collections.abc import Callable, Coroutine, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import FrameType
from typing import Any, TypeVar

from bench import procstat, rawclient, report, routing, wrk
from bench import throughput_fronts as fronts
from bench.static_backend import MODEL
from bench.stats import percentile

T = TypeVar("T")
TIMES, DASH = "\u00d7", "\u2013"  # the table spells them so
NAME = "throughput"
LOCAL = "127.0.0.1"


def progress(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


@dataclass(frozen=True, slots=True)
class Plan:
    runs: int  # each row this many times, alternating order; medians reported
    wrk_s: float  # the c64 window
    side_wrk_s: float  # the c8 and c128 windows (CPU flatness)
    rate_s: float  # the fixed-rate window
    big_prompt_n: int
    rate_rps: float = 20.0
    streams: tuple[int, ...] = (500, 2000)
    chunks: int = 50
    interval_ms: float = 10.0
    stream_timeout_s: float = 30.0
    big_prompt_kb: int = 220
    concurrencies: tuple[int, ...] = (64, 8, 128)  # 64 first: the headline column


QUICK = Plan(runs=1, wrk_s=4, side_wrk_s=2, rate_s=5, big_prompt_n=5)
FULL = Plan(runs=2, wrk_s=10, side_wrk_s=5, rate_s=15, big_prompt_n=20)


# --- what a row measured ----------------------------------------------------------------------
@dataclass(slots=True)
class Streams:
    n: int
    errors: Counter[str]
    ttfb_p50_ms: float
    ttfb_p99_ms: float
    cpu_ms: float  # router CPU per stream (NaN: no router process)
    wall_s: float
    samples: dict[str, str] = field(default_factory=dict)  # error kind -> a body the router sent

    @property
    def failed(self) -> int:
        return sum(self.errors.values())


@dataclass(slots=True)
class RowRun:
    key: str
    name: str
    failure: str = ""
    rps: dict[int, float] = field(default_factory=dict)  # concurrency -> successful req/s
    wrk_errors: dict[int, int] = field(default_factory=dict)
    cpu_ms: dict[int, float] = field(default_factory=dict)  # concurrency -> router CPU ms/request
    wrk_p50_p99_ms: tuple[float, float] = (math.nan, math.nan)
    added_ms: tuple[float, float] = (math.nan, math.nan)  # p50, p99 over direct at the fixed rate
    paced_errors: int = 0
    big_prompt_ms: float = math.nan
    big_prompt_errors: Counter[str] = field(default_factory=Counter)
    streams: dict[int, Streams] = field(default_factory=dict)
    peak_rss_mb: float = math.nan
    died: str = ""  # a router process exited mid-row: its figures stand, marked, with its log


def ms(values: Sequence[float], q: float) -> float:
    return percentile(values, q) * 1e3


def added(via: Sequence[float], direct: Sequence[float]) -> tuple[float, float]:
    """What the hop adds at p50 and p99: the via-path percentile minus the direct one, in ms."""
    return ms(via, 50) - ms(direct, 50), ms(via, 99) - ms(direct, 99)


def per_unit_ms(cpu_s: float, count: int) -> float:
    return cpu_s / count * 1e3 if count > 0 else math.nan


# --- requests ---------------------------------------------------------------------------------
def chat_body(stream: bool = False, content: str = "ping", max_tokens: int = 1) -> dict[str, object]:
    return {
        "model": MODEL,
        "messages": [{"role": "user", "content": content}],
        "max_tokens": max_tokens,
        "stream": stream,
    }


def big_prompt(kb: int) -> str:
    """Plain words, `kb` kilobytes: what a long RAG prompt looks like to a router's JSON parser."""
    words = "the quick brown fox jumps over the lazy dog "
    return (words * (kb * 1024 // len(words) + 1))[: kb * 1024]


def _run(coro: Coroutine[Any, Any, T]) -> T:
    return asyncio.run(coro)  # a fresh loop per phase: nothing of one phase leaks into the next


def settle(front: fronts.Front, timeout_s: float = 30.0) -> None:
    """One request through the router, answered or timed out, before the next phase: what the last
    phase left in flight (wrk stops mid-request; timed-out streams) is then not charged to it."""
    raw = rawclient.build_request(LOCAL, front.port, "/v1/chat/completions", chat_body(), front.headers)
    _run(rawclient.one_shot(LOCAL, front.port, raw, timeout_s))


def measure(front: fronts.Front, direct: fronts.Front, plan: Plan, script_dir: Path) -> RowRun:
    """Every column for one router that is up; the backend is `direct`."""
    row = RowRun("", front.name)
    cpu = procstat.CpuMeter(front.pids)
    path = "/v1/chat/completions"
    script = script_dir / f"post-{front.port}.lua"
    script.write_text(wrk.lua_script(chat_body(), front.headers))
    for c in plan.concurrencies:
        secs = plan.wrk_s if c == 64 else plan.side_wrk_s
        progress(f"    wrk c{c} {secs:.0f} s")
        cpu.start()
        res = wrk.run(front.url + path, script, c, secs)
        spent = cpu.stop()
        settle(front)
        row.rps[c] = res.ok_rps
        row.wrk_errors[c] = res.errors
        row.cpu_ms[c] = per_unit_ms(spent, res.requests) if front.pids else math.nan
        if c == 64:
            row.wrk_p50_p99_ms = (res.latency_ms.get(50, math.nan), res.latency_ms.get(99, math.nan))

    raw = rawclient.build_request(LOCAL, front.port, path, chat_body(), front.headers)
    if front.pids:
        progress(f"    {plan.rate_rps:.0f} req/s for {plan.rate_s:.0f} s, alternating with direct")
        raw_direct = rawclient.build_request(LOCAL, direct.port, path, chat_body())
        targets = [(LOCAL, front.port, raw), (LOCAL, direct.port, raw_direct)]
        paced = _run(rawclient.paced_alternating(targets, plan.rate_rps, plan.rate_s, timeout_s=10.0))
        row.added_ms = added(paced.latencies_s[0], paced.latencies_s[1])
        row.paced_errors = sum(paced.errors[0].values())

    progress(f"    {plan.big_prompt_kb} KB prompt x {plan.big_prompt_n}")
    big = chat_body(content=big_prompt(plan.big_prompt_kb))
    raw_big = rawclient.build_request(LOCAL, front.port, path, big, front.headers)
    seq = _run(rawclient.sequential(LOCAL, front.port, raw_big, plan.big_prompt_n, timeout_s=30.0))
    row.big_prompt_ms = ms(seq.latencies_s[0], 50)
    row.big_prompt_errors = seq.errors[0]

    raw_stream = rawclient.build_request(
        LOCAL, front.port, path, chat_body(True, max_tokens=plan.chunks), front.headers
    )
    for n in plan.streams:
        progress(f"    {n} concurrent streams")
        cpu.start()
        sr = _run(
            rawclient.concurrent_streams(LOCAL, front.port, raw_stream, n, plan.chunks, plan.stream_timeout_s)
        )
        spent = cpu.stop()
        settle(front)
        row.streams[n] = Streams(
            n,
            sr.errors,
            ms(sr.ttfb_s, 50),
            ms(sr.ttfb_s, 99),
            per_unit_ms(spent, n) if front.pids else math.nan,
            sr.wall_s,
            sr.samples,
        )
    row.peak_rss_mb = procstat.peak_rss_mb(procstat.descendants(front.pids)) if front.pids else math.nan
    return row


# --- rows -------------------------------------------------------------------------------------
ROWS = (
    "direct",
    "embedded",
    "envoy",
    "envoy-authz",
    "envoy-authz-w1",
    "global",
    "global-w1",
    "sglang",
    "vllm",
    "litellm",
    "litellm-tuned",
)
TITLES = {
    "direct": "direct (backend alone)",
    "embedded": "Fleetgate embedded proxy",
    "envoy": "Fleetgate Envoy + ext_proc picker",
    "envoy-authz": "Fleetgate Envoy + ext_authz picker",
    "envoy-authz-w1": "Fleetgate Envoy + ext_authz picker, gateway --workers 1",
    "global": "Fleetgate global router + gateway",
    "global-w1": "Fleetgate global router + gateway, gateway --workers 1",
    "sglang": "sglang-router",
    "vllm": "vllm-router",
    "litellm": "LiteLLM proxy",
    "litellm-tuned": "LiteLLM proxy, --num_workers one per core",
}
PEER_ROWS = {
    "sglang": "sglang-router",
    "vllm": "vllm-router",
    "litellm": "litellm",
    "litellm-tuned": "litellm",
}

# The `-w1` rows: the same tier with one gateway serving process instead of one per core (the
# default). On this box the gateway shares both cores with Envoy (or the router), the backend and the
# load generator, and a second serving process costs more in switching and cross-process bookkeeping
# than it adds; an operator co-locating them would size it so (docs/data-path.md, "Sizing").
# The peers, tuned: sglang-router's and vllm-router's defaults are already their throughput setting
# (a runtime thread per core; `--max-concurrent-requests` is off in sglang-router and 32,768 in
# vllm-router, far above the bench's 2,000 streams), so they run once; LiteLLM serves from one
# uvicorn process unless told otherwise, and its production guide sizes `--num_workers` to the
# cores, hence `litellm-tuned` next to its default.
_Starter = Callable[[fronts.Launcher, str, int], fronts.Front]
STARTERS: dict[str, _Starter] = {
    "embedded": lambda launch, backend, _c: fronts.embedded(launch, backend),
    "envoy": lambda launch, backend, c: fronts.envoy(launch, backend, c),
    "envoy-authz": lambda launch, backend, c: fronts.envoy(launch, backend, c, picker="ext_authz"),
    "envoy-authz-w1": lambda launch, backend, c: fronts.envoy(
        launch, backend, c, picker="ext_authz", workers=1
    ),
    "global": lambda launch, backend, _c: fronts.global_router(launch, backend),
    "global-w1": lambda launch, backend, _c: fronts.global_router(launch, backend, workers=1),
    "sglang": lambda launch, backend, _c: fronts.rust_peer(launch, backend, "sglang"),
    "vllm": lambda launch, backend, _c: fronts.rust_peer(launch, backend, "vllm"),
    "litellm": lambda launch, backend, _c: fronts.litellm(launch, backend),
    "litellm-tuned": lambda launch, backend, _c: fronts.litellm(launch, backend, os.cpu_count() or 1),
}


def envoy_workers(cores: int | None = None) -> int:
    """Envoy's worker threads in the Envoy rows: half the machine's cores, at least one.

    Envoy's own default is one per core, which suits a machine of its own. Here it shares the cores
    with the picker's serving processes (one per core by default) and the backend, and at c64 it
    spends about half of the row's CPU, so its share is about half the machine. An operator sizes
    Envoy's workers to the CPU it gets (Istio derives them from the proxy's CPU limit, Envoy Gateway
    passes `--cpuset-threads`). On 2 cores, 1 worker against 2 cost Envoy 12-24% less CPU per
    request in 5 of 5 alternated pairs (`python -m bench.row_cpu envoy-authz`) and served up to 11%
    more requests per second (bench/RESULTS.md). `--envoy-concurrency` runs Envoy's default."""
    return max(1, (cores if cores is not None else os.cpu_count() or 1) // 2)


def start_front(key: str, launch: fronts.Launcher, backend: str, envoy_concurrency: int) -> fronts.Front:
    return STARTERS[key](launch, backend, envoy_concurrency)


def default_rows() -> list[str]:
    have = set(fronts.installed_peers())
    return [k for k in ROWS if k not in PEER_ROWS or PEER_ROWS[k] in have]


# --- table ------------------------------------------------------------------------------------
def median(values: Sequence[float]) -> float:
    vals = [v for v in values if not math.isnan(v)]
    return statistics.median(vals) if vals else math.nan


def span(values: Sequence[int]) -> str:
    """One count, or `low-high` (an en dash) when runs disagree (as the issue reports timeouts)."""
    lo, hi = min(values), max(values)
    return f"{lo:,}" if lo == hi else f"{lo:,}{DASH}{hi:,}"


def fnum(x: float, digits: int = 0) -> str:
    return "n/a" if math.isnan(x) else f"{x:,.{digits}f}"


def pair(a: float, b: float, digits: int = 1) -> str:
    return "—" if math.isnan(a) and math.isnan(b) else f"{fnum(a, digits)} / {fnum(b, digits)}"


def ratio(a: float, b: float) -> str:
    return "n/a" if math.isnan(a) or math.isnan(b) or b <= 0 else f"{a / b:.2f}"


def streams_cell(runs: Sequence[RowRun], n: int) -> str:
    got = [r.streams[n] for r in runs if n in r.streams]
    if not got:
        return "n/a"
    failed = [s.failed for s in got]
    if max(failed) == 0:
        return "0 errors"
    kinds: Counter[str] = Counter()
    for s in got:
        kinds.update(s.errors)
    detail = ", ".join(f"{c:,} {TIMES} {k}" for k, c in kinds.most_common(3))
    return f"**{span(failed)} of {n:,} failed** ({detail}{' over all runs' if len(got) > 1 else ''})"


def _m(runs: Sequence[RowRun], get: Callable[[RowRun], float]) -> float:
    return median([get(r) for r in runs])


def _stream_m(runs: Sequence[RowRun], n: int, get: Callable[[Streams], float]) -> float:
    return median([get(r.streams[n]) for r in runs if n in r.streams])


def render(by_key: dict[str, list[RowRun]], plan: Plan) -> str:
    """The issue's table (same columns), a details table, and the failures with their logs."""
    ok = {k: [r for r in runs if not r.failure] for k, runs in by_key.items()}
    base = _m(ok.get("sglang", []), lambda r: r.rps.get(64, math.nan))
    small, large = plan.streams[0], plan.streams[-1]
    # issue 10's same-run ratios: the storm's TTFB p99 and the added p50 over sglang-router's (an
    # absolute added latency follows the host as much as the router; the ratio travels)
    base_ttfb99 = _stream_m(ok.get("sglang", []), large, lambda s: s.ttfb_p99_ms)
    base_added = _m(ok.get("sglang", []), lambda r: r.added_ms[0])
    main_rows, detail_rows, failures, notes = [], [], [], []
    for key, runs in by_key.items():
        good = ok[key]
        name = (good or runs)[0].name
        for r in runs:
            if r.failure:
                failures.append(f"- **{r.name} FAILED**: {r.failure}")
            if r.died:
                failures.append(f"- **{r.name} DIED**: {r.died}")
        samples = {k: v for r in good for st in r.streams.values() for k, v in st.samples.items()}
        for kind, text in sorted(samples.items()):
            notes.append(f"- {name}, streams answered {kind}: `{text.strip()[:200]}`")
        if not good:
            main_rows.append([f"{name} **FAILED**", *["—"] * 6])
            detail_rows.append([name, *["—"] * 11])
            continue
        rps64 = _m(good, lambda r: r.rps.get(64, math.nan))
        errs64 = [r.wrk_errors.get(64, 0) for r in good]
        rps_cell = fnum(rps64) + (f" ({span(errs64)} errors)" if any(errs64) else "")
        added_cell = (
            "—"
            if key == "direct"
            else pair(_m(good, lambda r: r.added_ms[0]), _m(good, lambda r: r.added_ms[1]))
        )
        if any(r.paced_errors for r in good):
            added_cell += f" ({span([r.paced_errors for r in good])} errors)"
        small_cell = pair(
            _stream_m(good, small, lambda s: s.ttfb_p50_ms),
            _stream_m(good, small, lambda s: s.ttfb_p99_ms),
            0,
        )
        small_failed = [r.streams[small].failed for r in good if small in r.streams]
        if any(small_failed):
            small_cell += f" ({span(small_failed)} of {small:,} failed)"
        cpu = {c: median([r.cpu_ms.get(c, math.nan) for r in good]) for c in plan.concurrencies}
        rps = {c: median([r.rps.get(c, math.nan) for r in good]) for c in plan.concurrencies}
        main_rows.append(
            [
                name + (" **(died)**" if any(r.died for r in good) else ""),
                rps_cell,
                ratio(rps64, base),
                added_cell,
                streams_cell(good, large),
                "—" if math.isnan(cpu[64]) else fnum(cpu[64], 2),
                small_cell,
            ]
        )
        cpu_s = {n: _stream_m(good, n, lambda s: s.cpu_ms) for n in plan.streams}
        big_errs = Counter[str]()
        for r in good:
            big_errs.update(r.big_prompt_errors)
        big_cell = fnum(_m(good, lambda r: r.big_prompt_ms), 1)
        if big_errs:
            big_cell += " (" + ", ".join(f"{c} {TIMES} {k}" for k, c in big_errs.most_common(2)) + ")"
        detail_rows.append(
            [
                name,
                "—" if key == "direct" else " / ".join(fnum(cpu[c], 2) for c in sorted(plan.concurrencies)),
                "—" if key == "direct" else ratio(cpu[max(plan.concurrencies)], cpu[min(plan.concurrencies)]),
                "—" if key == "direct" else pair(cpu_s[small], cpu_s[large], 1),
                "—" if key == "direct" else ratio(cpu_s[large], cpu_s[small]),
                pair(
                    _stream_m(good, large, lambda s: s.ttfb_p50_ms),
                    _stream_m(good, large, lambda s: s.ttfb_p99_ms),
                    0,
                ),
                "—"
                if key == "direct"
                else ratio(_stream_m(good, large, lambda s: s.ttfb_p99_ms), base_ttfb99),
                "—" if key == "direct" else ratio(_m(good, lambda r: r.added_ms[0]), base_added),
                big_cell,
                "—" if key == "direct" else fnum(_m(good, lambda r: r.peak_rss_mb)),
                " / ".join(fnum(rps[c]) for c in sorted(plan.concurrencies)),
                pair(_m(good, lambda r: r.wrk_p50_p99_ms[0]), _m(good, lambda r: r.wrk_p50_p99_ms[1]), 2),
            ]
        )
    conc = " / ".join(f"c{c}" for c in sorted(plan.concurrencies))
    parts = [
        report.markdown_table(
            [
                "router",
                "req/s c64",
                f"{TIMES} sglang-router",
                f"added p50/p99 ms @{plan.rate_rps:.0f} rps",
                f"{large:,} concurrent streams",
                "CPU ms/request",
                f"{small:,}-stream TTFB p50/p99 ms",
            ],
            main_rows,
            right={1, 2, 3, 5, 6},
        ),
        "",
        report.markdown_table(
            [
                "router",
                f"CPU ms/request {conc}",
                f"c{max(plan.concurrencies)} ÷ c{min(plan.concurrencies)}",
                f"CPU ms/stream {small:,} / {large:,}",
                f"{large:,} ÷ {small:,}",
                f"{large:,}-stream TTFB p50/p99 ms",
                f"{large:,}-stream TTFB p99 {TIMES} sglang-router",
                f"added p50 {TIMES} sglang-router",
                f"{plan.big_prompt_kb} KB prompt p50 ms",
                "peak RSS MB",
                f"req/s {conc}",
                "wrk c64 latency p50/p99 ms",
            ],
            detail_rows,
            right=set(range(1, 12)),
        ),
    ]
    if failures or notes:
        parts += ["", *failures, *notes]
    return "\n".join(parts)


def conditions(plan: Plan, load: tuple[float, float], envoy_concurrency: int) -> str:
    return (
        f"- backend: one bench/static_backend.py process; streams of {plan.chunks} chunks "
        f"{plan.interval_ms:.0f} ms apart; every stream bounded by {plan.stream_timeout_s:.0f} s\n"
        f"- wrk {plan.wrk_s:.0f} s at c64, {plan.side_wrk_s:.0f} s at c8 and c128; "
        f"{plan.rate_rps:.0f} req/s for {plan.rate_s:.0f} s alternating with direct; "
        f"{plan.runs} run(s) per row{', alternating order, medians' if plan.runs > 1 else ''}\n"
        f"- load average (1 min) at start / end: {load[0]:.2f} / {load[1]:.2f} "
        f"(the figures are only as quiet as the machine)\n"
        "- CPU and RSS: the router's whole process tree (Envoy and picker; global router and gateway), "
        "never the backend; the first table's CPU ms/request is at c64, CPU per stream counts every "
        f"stream started; Envoy runs --concurrency {envoy_concurrency}; {TIMES} sglang-router is req/s "
        "over sglang-router's in the same run\n\n"
    )


# --- run --------------------------------------------------------------------------------------
def _on_sigterm(signum: int, frame: FrameType | None) -> None:
    raise SystemExit(128 + signum)  # unwinds through every finally: all processes stopped


def run_rows(rows: list[str], plan: Plan, workdir: Path, envoy_concurrency: int) -> dict[str, list[RowRun]]:
    by_key: dict[str, list[RowRun]] = {k: [] for k in rows}
    backend_launch = fronts.Launcher(workdir)
    try:
        direct = fronts.static_backend(backend_launch, TITLES["direct"], plan.chunks, plan.interval_ms)
        for i in range(plan.runs):
            order = rows if i % 2 == 0 else rows[::-1]
            for key in order:
                progress(f"[throughput] run {i + 1}/{plan.runs}: {TITLES[key]}")
                t0 = time.monotonic()
                rowdir = workdir / f"run{i + 1}-{key}"
                rowdir.mkdir()
                launch = fronts.Launcher(rowdir)
                name = TITLES[key]
                try:
                    front = (
                        direct if key == "direct" else start_front(key, launch, direct.url, envoy_concurrency)
                    )
                    name = front.name
                    row = measure(front, direct, plan, rowdir)
                    row.died = "; ".join(launch.exited())
                except fronts.StartFailed as exc:
                    row = RowRun(key, name, failure=f"did not start: {exc}")
                except (RuntimeError, OSError, ValueError, AssertionError, TimeoutError) as exc:
                    tb = traceback.format_exception_only(exc)[-1].strip()
                    row = RowRun(key, name, failure=f"measurement failed: {tb}")
                finally:
                    launch.close()
                row.key = key
                backend_gone = backend_launch.exited()
                if backend_gone:
                    row.failure = row.failure or backend_gone[0]
                by_key[key].append(row)
                progress(
                    f"[throughput]     {'FAILED: ' + row.failure if row.failure else 'done'} in {time.monotonic() - t0:.0f} s"
                )
                if backend_gone:
                    raise RuntimeError(f"the static backend exited: {backend_gone[0]}")
    finally:
        backend_launch.close()
    return by_key


def keep_failed_logs(by_key: dict[str, list[RowRun]], workdir: Path, out: Path) -> None:
    """The temp dir goes away: copy a failed row's logs next to the table and point its note there."""
    for runs in by_key.values():
        for i, r in enumerate(runs, start=1):
            if not (r.failure or r.died):
                continue
            for log in sorted((workdir / f"run{i}-{r.key}").glob("*.log")):
                dest = out.parent / f"{out.stem}-run{i}-{log.name}"
                shutil.copy(log, dest)
                r.failure = r.failure.replace(str(log), str(dest))
                r.died = r.died.replace(str(log), str(dest))


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="fleetgate bench throughput", description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="one run, short windows (about 4 minutes)")
    ap.add_argument("--peers", action="store_true", help="install missing peers into .venv-peers first")
    ap.add_argument("--rows", help=f"comma-separated subset of {', '.join(ROWS)} (default: all available)")
    ap.add_argument("--runs", type=int, help="repetitions per row (default 2, 1 with --quick)")
    ap.add_argument("--stream-timeout", type=float, help="seconds per stream before it counts as timed out")
    ap.add_argument(
        "--envoy-concurrency",
        type=int,
        default=envoy_workers(),
        help="Envoy worker threads (default: half the cores, its share of the machine; Envoy's own "
        "default is one per core)",
    )
    ap.add_argument("--out", type=Path, help="markdown table (default bench/results/throughput[_quick].md)")
    args = ap.parse_args(argv)
    plan = QUICK if args.quick else FULL
    if args.runs or args.stream_timeout:
        from dataclasses import replace

        plan = replace(
            plan, runs=args.runs or plan.runs, stream_timeout_s=args.stream_timeout or plan.stream_timeout_s
        )
    if args.peers:
        routing.install_peers(litellm=True)
    rows = [k.strip() for k in args.rows.split(",")] if args.rows else default_rows()
    unknown = [k for k in rows if k not in ROWS]
    if unknown:
        print(f"unknown rows: {unknown} (choose from {', '.join(ROWS)})", file=sys.stderr)
        return 2
    wrk.ensure_installed()
    nofile = rawclient.raise_nofile()  # before any process starts: they inherit it
    if nofile < 2 * max(plan.streams) + 512:
        progress(f"[throughput] warning: open-files limit {nofile} is low for {max(plan.streams)} streams")
    try:
        import uvloop

        asyncio.set_event_loop_policy(uvloop.EventLoopPolicy())
    except ImportError:
        pass
    signal.signal(signal.SIGTERM, _on_sigterm)
    out = report.output_path(args.out, NAME, args.quick)
    load0 = os.getloadavg()[0]
    progress(f"[throughput] rows: {', '.join(rows)}; {plan.runs} run(s); load average {load0:.2f}")
    with tempfile.TemporaryDirectory(prefix="fleetgate-throughput-") as tmp:
        by_key = run_rows(rows, plan, Path(tmp), args.envoy_concurrency)
        keep_failed_logs(by_key, Path(tmp), out)
    text = conditions(plan, (load0, os.getloadavg()[0]), args.envoy_concurrency) + render(by_key, plan)
    print(text)
    command = ["fleetgate", "bench", NAME, *(sys.argv[1:] if argv is None else argv)]
    report.write_results(out, NAME, command, text)
    progress(f"[throughput] wrote {out}")
    return 1 if any(r.failure or r.died for runs in by_key.values() for r in runs) else 0


if __name__ == "__main__":
    raise SystemExit(main())
