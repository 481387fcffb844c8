"""Pod faults x outcome on a simulated fleet: `fleetgate bench faults [--quick]` (issue 11).

Three simulated pods behind one cluster gateway (embedded proxy), all in this process on loopback.
A bounded client (`--concurrency` workers, half the requests streamed) keeps steady load for the
whole run; the row's fault is set on its pods at `fault_at` and cleared at `clear_at`. Every row
runs twice: with outlier detection (the default) and with `proxy.outlierDetection.enabled: false`.

Per row: requests sent, succeeded (a JSON completion, or a stream with tokens that ended in
`[DONE]` without an error event), failed, duplicated, p99 latency of all requests, time to eject
(fault set → every faulted pod out of rotation: ejected, or stale/dead by its scrapes) and time to
recover (fault cleared → every faulted pod served a request again, from the simulator's own
counters). Duplicated counts answers that reached the client twice: a stream carrying two
completion ids (the simulator's id is `<pod>-<seq>`, so a stream restarted on another pod after a
token would show both), plus generations the pods completed beyond the client's successes
(sum of the pods' `request_success_total` minus successes seen by the client).

Settings that differ from the gateway defaults, and why: `proxy.firstByteTimeoutS` 2 s (the 60 s
default would make the hung row measure only the timeout), `outlierDetection.baseEjectionTimeS`
5 s (30 s default: recovery would not fit a short run). Writes bench/results/faults.md
(`--quick`: faults_quick.md; `--out` overrides); progress on stderr.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import math
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

from bench import report
from bench.stats import percentile
from cluster_gateway.gateway import ClusterGateway
from common.config.gateway import GatewaySpec
from common.config.loader import load_config_data
from modelsim.fleet import PodSpec, SimFleet

MODEL = "meta-llama/Llama-3.1-8B-Instruct"


def progress(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


@dataclass(frozen=True, slots=True)
class FaultRow:
    name: str
    pods: tuple[int, ...]  # which of the three pods get the fault
    mode: str
    params: dict[str, Any] = field(default_factory=dict)
    flap_s: float = 0.0  # > 0: the fault toggles on and off with this half-period
    expect_out: bool = True  # is taking the pod out of rotation the right answer?


ROWS: tuple[FaultRow, ...] = (
    FaultRow("1 of 3 pods answer 503", (0,), "error", {"status": 503}),
    FaultRow("2 of 3 pods answer 503", (0, 1), "error", {"status": 503}),
    FaultRow("1 of 3 pods answer 500", (0,), "error", {"status": 500}),
    FaultRow("2 of 3 pods answer 500", (0, 1), "error", {"status": 500}),
    FaultRow("1 of 3 pods answer 429", (0,), "429", expect_out=False),
    FaultRow("2 of 3 pods answer 429", (0, 1), "429", expect_out=False),
    FaultRow("hung pod", (0,), "hang"),
    FaultRow("slow pod (x8 step time)", (0,), "slow", {"factor": 8.0}, expect_out=False),
    FaultRow("pod killed with queued streams", (0,), "crash"),
    FaultRow("frozen metrics", (0,), "stale"),
    FaultRow("flapping pod (503, 0.5 s on/off)", (0,), "error", {"status": 503}, flap_s=0.5),
)


@dataclass(slots=True)
class Outcome:
    ok: bool
    seconds: float
    duplicated: bool
    broken: bool = False  # a stream that had tokens and ended with an error event and [DONE]


@dataclass(slots=True)
class RowResult:
    row: str
    ejection: bool
    sent: int
    succeeded: int
    failed: int
    broken: int  # of the failed: streams cut after their first token (error event + [DONE])
    duplicated: int
    p99_s: float
    eject_s: float | None
    recover_s: float | None


# --- the client ---------------------------------------------------------------------------------
async def one_request(client: httpx.AsyncClient, i: int, max_tokens: int) -> Outcome:
    stream = i % 2 == 1
    body = {
        "model": MODEL,
        "messages": [{"role": "user", "content": f"request {i}: tell me something"}],
        "max_tokens": max_tokens,
        "stream": stream,
    }
    t0 = time.monotonic()
    try:
        r = await client.post("/v1/chat/completions", json=body)
    except httpx.HTTPError:
        return Outcome(False, time.monotonic() - t0, False)
    dt = time.monotonic() - t0
    if r.status_code != 200:
        return Outcome(False, dt, False)
    if not stream:
        try:
            return Outcome(bool(r.json()["choices"][0]["message"]["content"]), dt, False)
        except (ValueError, KeyError, IndexError):
            return Outcome(False, dt, False)
    events = [ln[6:] for ln in r.text.splitlines() if ln.startswith("data: ")]
    objs = []
    for e in events:
        if e != "[DONE]":
            with contextlib.suppress(ValueError):
                objs.append(json.loads(e))
    ids = {o["id"] for o in objs if isinstance(o, dict) and "id" in o}
    error = any(isinstance(o, dict) and "error" in o for o in objs)
    tokens = any(c.get("delta", {}).get("content") for o in objs for c in o.get("choices", []))
    done = events[-1:] == ["[DONE]"] and events.count("[DONE]") == 1
    ok = tokens and not error and done
    broken = tokens and error and done
    return Outcome(ok, dt, len(ids) > 1 or events.count("[DONE]") > 1, broken)


async def steady_load(
    client: httpx.AsyncClient, concurrency: int, until: float, max_tokens: int
) -> list[Outcome]:
    outcomes: list[Outcome] = []
    counter = 0

    async def worker() -> None:
        nonlocal counter
        while time.monotonic() < until:
            counter += 1
            outcomes.append(await one_request(client, counter, max_tokens))

    await asyncio.gather(*(worker() for _ in range(concurrency)))
    return outcomes


# --- one row ------------------------------------------------------------------------------------
def gateway_spec(urls: list[str], ejection: bool) -> GatewaySpec:
    data: dict[str, Any] = {
        "discovery": {"static": {"endpoints": urls}},
        "proxy": {
            "firstByteTimeoutS": 2.0,
            "outlierDetection": {"enabled": ejection, "baseEjectionTimeS": 5.0},
        },
    }
    return load_config_data(data, GatewaySpec, source="bench")


def served(fleet: SimFleet, i: int) -> int:
    return int(sum(fleet.state(i)["counters"]["request_success_total"].values()))


async def run_row(row: FaultRow, ejection: bool, args: argparse.Namespace) -> RowResult:
    specs = [PodSpec(profile="tiny", max_num_seqs=4, time_scale=2.0, seed=i) for i in range(3)]
    async with SimFleet(specs) as fleet:
        gw = ClusterGateway(gateway_spec(fleet.urls, ejection), port=0, extproc_port=0)
        await gw.start()
        try:
            deadline = time.monotonic() + 15
            while not all(not p.stale and p.models for p in gw.pool.pods()) or len(gw.pool.pods()) < 3:
                if time.monotonic() > deadline:
                    raise RuntimeError("gateway never saw its pods")
                await asyncio.sleep(0.05)
            limits = httpx.Limits(max_connections=args.concurrency * 2)
            async with httpx.AsyncClient(base_url=gw.url, timeout=60, limits=limits) as client:
                start = time.monotonic()
                end = start + args.duration
                load = asyncio.create_task(steady_load(client, args.concurrency, end, args.max_tokens))
                eject_s, recover_s = await control(fleet, gw, row, start, args)
                outcomes = await load
            # every request has ended: the pods' counters are final
            pod_successes = sum(served(fleet, i) for i in range(3))
        finally:
            await gw.stop()
    ok = sum(o.ok for o in outcomes)
    dup = sum(o.duplicated for o in outcomes) + max(0, pod_successes - ok)
    return RowResult(
        row.name,
        ejection,
        len(outcomes),
        ok,
        len(outcomes) - ok,
        sum(o.broken for o in outcomes),
        dup,
        percentile([o.seconds for o in outcomes], 99),
        eject_s,
        recover_s,
    )


async def control(
    fleet: SimFleet, gw: ClusterGateway, row: FaultRow, start: float, args: argparse.Namespace
) -> tuple[float | None, float | None]:
    """Set the fault, watch for its pods leaving rotation, clear it, watch them serve again."""
    names = [fleet.urls[i] for i in row.pods]
    await asyncio.sleep(max(0.0, start + args.fault_at - time.monotonic()))
    fault_set = time.monotonic()
    for i in row.pods:
        fleet.set_fault(i, row.mode, **row.params)
    eject_s: float | None = None
    clear_at = start + args.clear_at
    on = True
    next_flip = fault_set + row.flap_s
    while time.monotonic() < clear_at:
        now = time.monotonic()
        if eject_s is None and all(_out(gw, n, now) for n in names):
            eject_s = now - fault_set
        if row.flap_s and now >= next_flip:
            on = not on
            for i in row.pods:
                if on:
                    fleet.set_fault(i, row.mode, **row.params)
                else:
                    fleet.set_fault(i, "none")
            next_flip = now + row.flap_s
        await asyncio.sleep(0.02)
    before = [served(fleet, i) for i in row.pods]
    cleared = time.monotonic()
    for i in row.pods:
        fleet.set_fault(i, "none")
    recover_s: float | None = None
    stop = start + args.duration
    while time.monotonic() < stop:
        if all(served(fleet, i) > b for i, b in zip(row.pods, before, strict=True)):
            recover_s = time.monotonic() - cleared
            break
        await asyncio.sleep(0.05)
    return eject_s, recover_s


def _out(gw: ClusterGateway, name: str, now: float) -> bool:
    pod = gw.pool.get(name)
    return pod is not None and (pod.ejected_until > now or pod.stale)


# --- the report ---------------------------------------------------------------------------------
def _secs(v: float | None, cap: float) -> str:
    if v is None:
        return f"> {cap:.0f} s"
    return f"{v:.2f} s"


def format_table(results: Sequence[RowResult], args: argparse.Namespace) -> str:
    by_row: dict[str, dict[bool, RowResult]] = {}
    for res in results:
        by_row.setdefault(res.row, {})[res.ejection] = res
    header = [
        "fault",
        "ejection",
        "sent",
        "succeeded",
        "failed (mid-stream)",
        "success %",
        "duplicated",
        "p99 latency",
        "time to eject",
        "time to recover",
    ]
    rows = []
    eject_cap = args.clear_at - args.fault_at
    recover_cap = args.duration - args.clear_at
    for name, both in by_row.items():
        for ejection in (True, False):
            r = both.get(ejection)
            if r is None:
                continue
            share = 100.0 * r.succeeded / r.sent if r.sent else math.nan
            rows.append(
                [
                    name,
                    "on" if ejection else "off",
                    str(r.sent),
                    str(r.succeeded),
                    f"{r.failed} ({r.broken})" if r.broken else str(r.failed),
                    f"{share:.2f}",
                    str(r.duplicated),
                    f"{r.p99_s * 1000:.0f} ms",
                    _secs(r.eject_s, eject_cap),
                    _secs(r.recover_s, recover_cap),
                ]
            )
    return report.markdown_table(header, rows, right=range(2, 10))


def note(args: argparse.Namespace) -> str:
    return (
        f"3 simulated `tiny` pods (max_num_seqs 4, time_scale 2) behind one gateway, {args.concurrency} "
        f"client workers (every other request streamed, max_tokens {args.max_tokens}) for "
        f"{args.duration:.0f} s per run; fault set at {args.fault_at:.0f} s, cleared at "
        f"{args.clear_at:.0f} s. 'time to eject': fault set → every faulted pod out of rotation "
        "(ejected, or stale/dead by its scrapes); '> N s' = not within the fault window (for 429 and "
        "the slow pod staying in rotation is intended: overload and slowness are not breakage). "
        "'failed (mid-stream)': of the failed, streams that had tokens when their pod broke (they "
        "end with an OpenAI error event and [DONE]; never retried, so never duplicated). "
        "'time to recover': fault cleared → every faulted pod served again. firstByteTimeoutS 2 s, "
        "baseEjectionTimeS 5 s (see the module docstring); client, gateway and pods share this "
        "process and its CPU."
    )


async def run(args: argparse.Namespace) -> list[RowResult]:
    rows = [r for r in ROWS if not args.rows or any(s in r.name for s in args.rows)]
    out = []
    for row in rows:
        for ejection in (True, False):
            res = await run_row(row, ejection, args)
            progress(
                f"{row.name} (ejection {'on' if ejection else 'off'}): {res.succeeded}/{res.sent} ok, "
                f"eject {res.eject_s}, recover {res.recover_s}"
            )
            out.append(res)
    return out


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="fleetgate bench faults", description=__doc__)
    ap.add_argument("--quick", action="store_true", help="9 s per run, 22 runs (~4 min)")
    ap.add_argument("--duration", type=float, default=30.0, help="seconds of load per run")
    ap.add_argument("--fault-at", type=float, default=3.0, help="seconds into a run when the fault starts")
    ap.add_argument("--clear-at", type=float, default=18.0, help="seconds into a run when it is cleared")
    ap.add_argument("--concurrency", type=int, default=8, help="concurrent clients (default 8)")
    ap.add_argument("--max-tokens", type=int, default=16, help="max_tokens of each request (default 16)")
    ap.add_argument("--rows", nargs="*", default=[], help="only rows whose name contains one of these")
    ap.add_argument("--out", type=Path, help="markdown table (default bench/results/faults[_quick].md)")
    args = ap.parse_args(argv)
    if args.quick:
        args.duration, args.fault_at, args.clear_at = 9.0, 1.0, 4.0
    if not 0 <= args.fault_at < args.clear_at < args.duration:
        ap.error("need 0 <= --fault-at < --clear-at < --duration")
    t0 = time.monotonic()
    results = asyncio.run(run(args))
    table = (
        format_table(results, args) + "\n\n" + note(args) + f"\n\nWall time {time.monotonic() - t0:.0f} s."
    )
    print(table)
    path = report.output_path(args.out, "faults", args.quick)
    report.write_results(path, "faults", report.module_command("bench.faults_bench", argv), table)
    progress(f"wrote {path}")
    return 0


if __name__ == "__main__":
    with contextlib.suppress(KeyboardInterrupt):
        sys.exit(main())
