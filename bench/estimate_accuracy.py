"""How close the capacity agent's TTFT estimate is to what clients see: `fleetgate bench estimate [--quick]`.

One simulated pod (`fleetgate sim`, L4 profile by default) behind a cluster gateway whose capacity
agent reports to a real CapacityServer running in this process; open-loop Poisson chat load at
several offered rates, one after the other (each starts on an idle pod, warms up, then is measured).
Per rate it compares, over the same measurement window:
  * the agent's `est_ttft_ms` as the router stores it, sampled every 0.1 s and time-averaged;
  * the TTFT clients measured (first streamed token, through the gateway) for requests sent in the window.
The estimate means "the TTFT a request arriving now would see"; Poisson arrivals see time averages,
so the time-averaged estimate and the mean TTFT of the window's arrivals measure the same thing.
The engine's own histograms over the window (TTFT, queue time, prefill phase) show where the time goes.
Writes bench/results/estimate.md (`--quick`: estimate_quick.md; `--out` overrides); progress on stderr.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import math
import re
import statistics
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import yaml

from bench import procs, report
from bench.loadgen import Result, replay
from bench.stats import percentile
from bench.trace import TraceSpec, generate
from common.config.router import AgentAuth
from common.config.router import CapacityServer as CapacityServerConfig
from global_router.agent_auth import hash_token
from global_router.capacity_server import CapacityServer
from global_router.fleet_view import FleetView, MemoryFleetView

MODEL = "meta-llama/Llama-3.1-8B-Instruct"
CLUSTER = "estimate-bench"
TOKEN = "tok-estimate-bench"
SAMPLE_EVERY_S = 0.1
ENGINE_FIGURES = {  # column -> the simulated vLLM engine's histogram
    "ttft": "vllm:time_to_first_token_seconds",
    "queue": "vllm:request_queue_time_seconds",
    "prefill": "vllm:request_prefill_time_seconds",
}


def progress(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


# --- pure helpers (tested in tests/bench/test_estimate_accuracy_math.py) -----------------------
def time_weighted_mean(samples: Sequence[tuple[float, float]], end: float) -> float:
    """Mean of a step function given as (time, value) samples, each holding until the next (the
    last until `end`): sampling gaps (a busy event loop) then do not bias the average. NaN if empty."""
    if not samples:
        return math.nan
    total = weight = 0.0
    for (t, v), nxt in zip(samples, [*(t for t, _ in samples[1:]), end], strict=True):
        dt = max(0.0, nxt - t)
        total += v * dt
        weight += dt
    if weight > 0:
        return total / weight
    return statistics.fmean(v for _, v in samples)


def histogram_sum_count(body: str, name: str) -> tuple[float, float]:
    """(sum, count) of a Prometheus histogram over all its label sets; (0, 0) when absent."""
    totals = []
    for suffix in ("_sum", "_count"):
        rx = re.compile(rf"^{re.escape(name + suffix)}(?:\{{[^}}]*\}})? (\S+)$", re.M)
        totals.append(sum(float(v) for v in rx.findall(body)))
    return totals[0], totals[1]


def window_mean(before: tuple[float, float], after: tuple[float, float]) -> float:
    """Mean observation between two (sum, count) readings; NaN when nothing was observed."""
    count = after[1] - before[1]
    return (after[0] - before[0]) / count if count > 0 else math.nan


@dataclass(slots=True)
class RateRow:
    rate: float
    requests: int = 0
    errors: int = 0
    client_mean_ms: float = math.nan
    client_p50_ms: float = math.nan
    engine_ms: dict[str, float] = field(default_factory=dict)  # ENGINE_FIGURES means over the window
    est_mean_ms: float = math.nan
    est_samples: int = 0
    queued: float = math.nan  # time-averaged, as reported
    running: float = math.nan

    @property
    def ratio_mean(self) -> float:
        return self.est_mean_ms / self.client_mean_ms if self.client_mean_ms else math.nan

    @property
    def ratio_p50(self) -> float:
        return self.est_mean_ms / self.client_p50_ms if self.client_p50_ms else math.nan


def client_ttfts_ms(results: Sequence[Result], start_s: float, end_s: float) -> tuple[list[float], int]:
    """TTFTs (ms) of the successful requests sent in [start_s, end_s), and that window's error count."""
    sent = [r for r in results if start_s <= r.at_s < end_s]
    ttfts = [r.ttft_s * 1000.0 for r in sent if r.ok and r.ttft_s is not None]
    return ttfts, len(sent) - len(ttfts)


def format_table(rows: Sequence[RateRow]) -> str:
    out = [
        "| offered req/s | requests (errors) | client TTFT mean ms | client TTFT p50 ms "
        "| engine TTFT / queue / prefill ms | reported queued / running | estimate mean ms "
        "| est ÷ client mean | est ÷ client p50 |",
        "| ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for r in rows:
        eng = " / ".join(f"{r.engine_ms.get(k, math.nan):.0f}" for k in ENGINE_FIGURES)
        out.append(
            f"| {r.rate:g} | {r.requests} ({r.errors}) | {r.client_mean_ms:.0f} | {r.client_p50_ms:.0f} "
            f"| {eng} | {r.queued:.1f} / {r.running:.1f} | {r.est_mean_ms:.0f} "
            f"| {r.ratio_mean:.2f} | {r.ratio_p50:.2f} |"
        )
    return "\n".join(out)


# --- the run -----------------------------------------------------------------------------------
async def _engine_readings(client: httpx.AsyncClient, url: str) -> dict[str, tuple[float, float]]:
    body = (await client.get(url + "/metrics")).text
    return {k: histogram_sum_count(body, name) for k, name in ENGINE_FIGURES.items()}


async def _sample_estimates(
    view: FleetView, start: float, end: float
) -> tuple[list[tuple[float, float]], list[tuple[float, float]], list[tuple[float, float]]]:
    """(time, est_ttft_ms), (time, queued), (time, running) from the router's view in [start, end)."""
    est: list[tuple[float, float]] = []
    queued: list[tuple[float, float]] = []
    running: list[tuple[float, float]] = []
    await asyncio.sleep(max(0.0, start - time.monotonic()))
    while (now := time.monotonic()) < end:
        state = view.get(CLUSTER)
        m = state.models.get(MODEL) if state is not None else None
        if m is not None and m.ready_pods:
            est.append((now, m.est_ttft_ms))
            queued.append((now, float(m.queued)))
            running.append((now, float(m.running)))
        await asyncio.sleep(SAMPLE_EVERY_S)
    return est, queued, running


async def measure_rate(
    view: FleetView, pod_url: str, gw_url: str, rate: float, warmup_s: float, measure_s: float, seed: int
) -> RateRow:
    spec = TraceSpec(
        duration_s=warmup_s + measure_s,
        base_rps=rate,
        burst_every_s=0.0,  # steady Poisson: no bursts
        burst_factor=1.0,
        long_fraction=0.0,  # chats only: every request streams, so each has a client-side TTFT
        seed=seed,
    )
    trace = generate(spec)
    t0 = time.monotonic()
    start, end = t0 + warmup_s, t0 + warmup_s + measure_s

    async def engine_window() -> dict[str, float]:
        async with httpx.AsyncClient(timeout=10) as c:
            await asyncio.sleep(max(0.0, start - time.monotonic()))
            before = await _engine_readings(c, pod_url)
            await asyncio.sleep(max(0.0, end - time.monotonic()))
            after = await _engine_readings(c, pod_url)
        return {k: 1000.0 * window_mean(before[k], after[k]) for k in ENGINE_FIGURES}

    results, engine, (est, queued, running) = await asyncio.gather(
        replay(gw_url, trace, timeout_s=120.0), engine_window(), _sample_estimates(view, start, end)
    )
    ttfts, errors = client_ttfts_ms(results, warmup_s, warmup_s + measure_s)
    return RateRow(
        rate=rate,
        requests=len(ttfts) + errors,
        errors=errors,
        client_mean_ms=statistics.fmean(ttfts) if ttfts else math.nan,
        client_p50_ms=percentile(ttfts, 50),
        engine_ms=engine,
        est_mean_ms=time_weighted_mean(est, end),
        est_samples=len(est),
        queued=time_weighted_mean(queued, end),
        running=time_weighted_mean(running, end),
    )


def _gateway_spec(pod_url: str, grpc_port: int, token_file: Path) -> dict[str, object]:
    return {
        "clusterId": CLUSTER,
        "region": "bench",
        "discovery": {"static": {"endpoints": [pod_url]}},
        "scrape": {"intervalMs": 100},
        "globalRouter": {
            "address": f"127.0.0.1:{grpc_port}",
            "tokenFile": str(token_file),
            "reportIntervalMs": 250,
        },
    }


async def _wait_reported(view: FleetView, timeout_s: float = 30.0) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        state = view.get(CLUSTER)
        if state is not None and state.models.get(MODEL) is not None and state.models[MODEL].ready_pods:
            return
        await asyncio.sleep(0.1)
    raise RuntimeError("the agent never reported a ready pod")


async def run(args: argparse.Namespace) -> list[RateRow]:
    view = MemoryFleetView(ttl_s=30.0)
    await view.start()
    cfg = CapacityServerConfig(
        port=0,
        report_interval_ms=250,
        agents=[
            AgentAuth(
                cluster_id=CLUSTER,
                token_sha256=hash_token(TOKEN),
                gateway_hosts=["127.0.0.1"],
                allow_loopback=True,
            )
        ],
    )
    server = CapacityServer(cfg, view)
    grpc_port = await server.start()
    started = []
    rows: list[RateRow] = []
    try:
        with tempfile.TemporaryDirectory(prefix="fleetgate-estimate-") as tmp:
            sim = procs.spawn(
                "sim", "--pods", "1", "--base-port", "0", "--profile", args.profile,
                "--seed", str(args.seed), "--log-level", "warning",
            )  # fmt: skip
            started.append(sim)
            (pod_url,) = await asyncio.to_thread(procs.expect, sim.stdout, r"listening on (http://\S+)", 1)
            token_file = Path(tmp) / "agent.token"
            token_file.write_text(TOKEN)
            spec_path = Path(tmp) / "gateway.yaml"
            spec_path.write_text(yaml.safe_dump(_gateway_spec(pod_url, grpc_port, token_file)))
            gw = procs.spawn("gateway", "--config", str(spec_path), "--port", "0", "--log-format", "text")
            started.append(gw)
            (port,) = await asyncio.to_thread(
                procs.expect, gw.stderr, r"listening on http://127\.0\.0\.1:(\d+)", 1
            )
            procs.drain_in_background(sim.stdout, sim.stderr, gw.stdout, gw.stderr)
            await _wait_reported(view)
            for i, rate in enumerate(args.rates):
                progress(f"rate {rate:g} req/s: {args.warmup:g} s warm-up + {args.measure:g} s measured")
                row = await measure_rate(
                    view, pod_url, f"http://127.0.0.1:{port}", rate, args.warmup, args.measure, args.seed + i
                )
                progress(
                    f"  client TTFT mean {row.client_mean_ms:.0f} ms, estimate {row.est_mean_ms:.0f} ms "
                    f"({row.ratio_mean:.2f}), {row.est_samples} samples"
                )
                rows.append(row)
    finally:
        for p in reversed(started):
            procs.stop(p)
        await server.stop()
        await view.stop()
    return rows


def note(args: argparse.Namespace) -> str:
    return (
        f"One `{args.profile}` simulated pod (real time) behind a cluster gateway whose capacity agent "
        "reports every 250 ms (scrapes every 100 ms, latency histograms at most once a second) to a "
        "CapacityServer in the bench process. Per offered rate: steady Poisson chat load (prompts: one "
        "of 4 shared ~800-token system prompts + 40-400 user tokens; 40-200 output tokens, streamed), "
        f"{args.warmup:g} s warm-up from an idle pod, then {args.measure:g} s measured. Compared over "
        "the same window: the estimate = the model's `est_ttft_ms` in the router's fleet view, sampled "
        "every 0.1 s and time-averaged (what a request arriving at a random instant is predicted to "
        "wait), vs the client-measured TTFT (first streamed token, through the gateway) of the "
        "requests sent in the window (Poisson arrivals see time averages, so both are the same "
        "expectation). Engine columns: the pod's own histograms over the window (TTFT = queue + "
        "prefill phase; no proxy or HTTP time). Reported queued/running: time-averaged from the "
        "reports."
    )


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="fleetgate bench estimate", description=__doc__)
    ap.add_argument("--quick", action="store_true", help="two rates, shorter windows (~2.5 min)")
    ap.add_argument("--rates", default="0.5,1.5,2.5,3.5", help="offered req/s, comma-separated")
    ap.add_argument(
        "--warmup",
        type=float,
        default=30.0,
        help="seconds of load before each window (at least the agent's 30 s perf window, so the first "
        "requests' cold-prefix prefills have left it)",
    )
    ap.add_argument("--measure", type=float, default=60.0, help="seconds measured per rate")
    ap.add_argument(
        "--profile", default="l4-llama3-8b", help="simulator profile of the pod (default l4-llama3-8b)"
    )
    ap.add_argument("--seed", type=int, default=11, help="seed of the pod and the load (default 11)")
    ap.add_argument("--out", type=Path, help="markdown table (default bench/results/estimate[_quick].md)")
    args = ap.parse_args(argv)
    if args.quick:
        args.rates = "1.5,3" if args.rates == "0.5,1.5,2.5,3.5" else args.rates
        args.measure = min(args.measure, 30.0)
    args.rates = [float(r) for r in str(args.rates).split(",")]
    t0 = time.monotonic()
    rows = asyncio.run(run(args))
    table = format_table(rows) + "\n\n" + note(args) + f"\n\nWall time {time.monotonic() - t0:.0f} s."
    print(table)
    path = report.output_path(args.out, "estimate", args.quick)
    report.write_results(path, "estimate", report.module_command("bench.estimate_accuracy", argv), table)
    progress(f"wrote {path}")
    return 0


if __name__ == "__main__":
    with contextlib.suppress(KeyboardInterrupt):
        sys.exit(main())
