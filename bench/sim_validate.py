"""Validate the simulator against its own hardware profile: `fleetgate bench sim-validate [--quick]`.

Starts one simulated pod in a separate process (`fleetgate sim`), drives it with closed-loop
streaming clients at several concurrencies, and prints measured output throughput, TTFT and
inter-token latency next to what the profile's roofline predicts for that batch, plus the
simulator process's CPU use (so fleet-sized benchmarks can be planned for a 2-core machine).

Then the calibration table: what the simulator does (a batch-1 decode's ITL and a one-chunk
prefill, measured; its KV pool and batch limits, read from the pod) next to the published or
derived figure each profile number stands on (`modelsim.profiles.REFERENCES`), with its source.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import re
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import httpx

from common.tokens import count_tokens
from modelsim.profiles import METRICS, REFERENCES, HardwareProfile, get_profile

ROOT = Path(__file__).resolve().parents[1]
MODEL = "meta-llama/Llama-3.1-8B-Instruct"


@dataclass
class LevelResult:
    concurrency: int
    requests: int = 0
    output_tokens: int = 0
    wall_s: float = 0.0
    cpu_s: float = 0.0
    ttfts: list[float] = field(default_factory=list)
    itls: list[float] = field(default_factory=list)
    tpots: list[float] = field(default_factory=list)  # per request: (last - first token) / (n - 1)
    errors: int = 0


def pct(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    s = sorted(values)
    return s[min(len(s) - 1, int(q * len(s)))]


def proc_cpu_s(pid: int) -> float:
    """utime + stime of a process, from /proc (Linux)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def prompt_for(i: int, tokens: int) -> str:
    head = f"bench request {i:08d}: "
    return (head * (4 * tokens // len(head) + 1))[: 4 * tokens]


async def one_request(
    c: httpx.AsyncClient, i: int, prompt_tokens: int, max_tokens: int, res: LevelResult
) -> None:
    body = {"model": MODEL, "prompt": prompt_for(i, prompt_tokens), "max_tokens": max_tokens, "stream": True}
    t0 = time.monotonic()
    first: float | None = None
    last: float | None = None
    tokens = 0
    try:
        async with c.stream("POST", "/v1/completions", json=body) as r:
            if r.status_code != 200:
                res.errors += 1
                await r.aread()
                return
            async for line in r.aiter_lines():
                if not line.startswith("data: {"):
                    continue
                now = time.monotonic()
                choices = json.loads(line[6:])["choices"]
                n = sum(count_tokens(ch["text"]) for ch in choices)
                if n == 0:
                    continue
                if first is None:
                    first = now
                    res.ttfts.append(now - t0)
                elif last is not None:
                    res.itls.extend([(now - last) / n] * n)  # merged deltas: spread the gap per token
                last = now
                tokens += n
    except httpx.HTTPError:
        res.errors += 1
        return
    res.requests += 1
    if first is not None and last is not None and tokens > 1:
        res.tpots.append((last - first) / (tokens - 1))


async def run_level(
    urls: list[str], pid: int, concurrency: int, duration_s: float, prompt_tokens: int, max_tokens: int
) -> LevelResult:
    """`concurrency` closed-loop clients per pod, on every pod at once."""
    res = LevelResult(concurrency)
    limits = httpx.Limits(max_connections=concurrency + 4, max_keepalive_connections=concurrency + 4)
    clients = [httpx.AsyncClient(base_url=u, timeout=120, limits=limits) for u in urls]
    try:
        counter = iter(range(10**9))
        rng = random.Random(concurrency)
        deadline = time.monotonic() + duration_s
        stagger_s = min(duration_s / 4, 0.02 * max_tokens)

        async def worker(c: httpx.AsyncClient, w: int) -> None:
            # Desynchronise the closed loop: staggered starts, output lengths 0.5x..1.5x.
            await asyncio.sleep(stagger_s * w / concurrency)
            while time.monotonic() < deadline:
                out = rng.randint(max(1, max_tokens // 2), max_tokens * 3 // 2)
                await one_request(c, next(counter) * 1000 + w, prompt_tokens, out, res)

        async def steady_window() -> None:
            # Throughput and CPU from the servers' own counters, between the end of the ramp-up
            # and the deadline, so neither the staggered start nor the drain dilutes them.
            await asyncio.sleep(stagger_s)
            tok0, cpu0, t0 = await generated(clients), proc_cpu_s(pid), time.monotonic()
            await asyncio.sleep(max(0.1, deadline - time.monotonic()))
            res.output_tokens = int(await generated(clients) - tok0)
            res.cpu_s = proc_cpu_s(pid) - cpu0
            res.wall_s = time.monotonic() - t0

        workers = [worker(c, w) for c in clients for w in range(concurrency)]
        await asyncio.gather(steady_window(), *workers)
    finally:
        for c in clients:
            await c.aclose()
    return res


async def generated(clients: list[httpx.AsyncClient]) -> float:
    total = 0.0
    for c in clients:
        body = (await c.get("/metrics")).text
        m = re.search(r"^vllm:generation_tokens_total\{[^}]*\} (\S+)$", body, re.M)
        total += float(m.group(1)) if m else 0.0
    return total


def expected(
    p: HardwareProfile, c: int, prompt: int, out: int, scale: float
) -> tuple[float, float, float, float]:
    """Roofline prediction at steady state with `c` requests in the batch: (tok/s, TTFT, ITL, TPOT).

    Every request needs `out` decode steps shared by the whole batch, and its prefill rides in one
    step (per chunk) with the batch's decodes, stretching that step; throughput is the batch's
    tokens over that total GPU time. ITL is a plain decode step (the median), TPOT the mean
    per-token time including the prefill stalls of the other requests.
    """
    batch = min(c, p.max_num_seqs)
    ctx = batch * (prompt + out // 2)
    decode = p.step_seconds(batch, batch, ctx)
    chunks = -(-prompt // p.max_num_batched_tokens)
    chunk = min(prompt, p.max_num_batched_tokens)
    with_prefill = p.step_seconds(batch, chunk + batch - 1, ctx + chunk)
    ttft = chunks * with_prefill
    gpu_time = out * decode + batch * chunks * (with_prefill - decode)
    return batch * out / gpu_time / scale, ttft * scale, decode * scale, gpu_time / out * scale


async def calibration(url: str, p: HardwareProfile, scale: float) -> dict[str, float]:
    """The simulator's own figures for each calibration metric (times divided by `scale`)."""
    out: dict[str, float] = {}
    async with httpx.AsyncClient(base_url=url, timeout=120) as c:
        state = (await c.get("/admin/state")).json()
        out["kv_tokens"] = state["kv"]["num_gpu_blocks"] * state["kv"]["block_size"]
        out["max_num_seqs"] = state["max_num_seqs"]
        out["max_num_batched_tokens"] = state["max_num_batched_tokens"]
        # Alone on the pod: batch 1. The engine's own histograms, not the client's clock: a busy
        # client reading a fast pod's stream gets tokens merged, which says nothing about the pod.
        itl = "vllm:inter_token_latency_seconds"
        s0, n0 = await histogram(c, itl)
        await one_request(c, 7_000_001, 64, 64, LevelResult(1))
        s1, n1 = await histogram(c, itl)
        out["itl_b1_ms"] = 1e3 * (s1 - s0) / max(1.0, n1 - n0) / scale
        chunk = p.max_num_batched_tokens - 1  # one prefill step, the first token sampled in it
        prefill = "vllm:request_prefill_time_seconds"
        s0, n0 = await histogram(c, prefill)
        for i in range(3):  # distinct prompts: no prefix-cache hits
            await one_request(c, 7_100_000 + i, chunk, 1, LevelResult(1))
        s1, n1 = await histogram(c, prefill)
        out["prefill_tok_s"] = chunk * (n1 - n0) / max(1e-9, s1 - s0) * scale
    return out


async def histogram(c: httpx.AsyncClient, name: str) -> tuple[float, float]:
    """(sum, count) of one of the pod's histograms (the engine's own clock, not a loaded client's)."""
    body = (await c.get("/metrics")).text
    total = re.search(rf"^{name}_sum\{{[^}}]*\}} (\S+)$", body, re.M)
    count = re.search(rf"^{name}_count\{{[^}}]*\}} (\S+)$", body, re.M)
    return (float(total.group(1)) if total else 0.0, float(count.group(1)) if count else 0.0)


def print_calibration(profile: str, measured: dict[str, float]) -> None:
    refs = REFERENCES.get(profile)
    if not refs:
        print(f"(no published references for profile {profile}: a test profile)")
        return
    print("| metric | sim | reference | within | kind | source |")
    print("|---|---|---|---|---|---|")
    for r in refs:
        v = measured[r.metric]
        ref = f"{r.low:,.0f}" if r.low == r.high else f"{r.low:,.4g} - {r.high:,.4g}"
        ok = "yes" if r.low * 0.999 <= v <= r.high * 1.001 else "NO"
        print(f"| {METRICS[r.metric]} | {v:,.4g} | {ref} | {ok} | {r.kind} | {r.source} |")


def start_sim(profile: str, time_scale: float, pods: int) -> tuple[subprocess.Popen[str], list[str]]:
    cmd = [sys.executable, "-m", "fleetgate.cli", "sim", "--pods", str(pods), "--base-port", "0",
           "--profile", profile, "--time-scale", str(time_scale), "--log-level", "warning"]  # fmt: skip
    proc = subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None
    urls = []
    for _ in range(pods):
        line = proc.stdout.readline()
        m = re.search(r"listening on (http://\S+)", line)
        if not m:
            proc.kill()
            raise SystemExit(f"simulator did not start: {line!r}")
        urls.append(m.group(1))
    return proc, urls


async def main_async(args: argparse.Namespace) -> int:
    p = get_profile(args.profile)
    levels = [int(x) for x in args.concurrency.split(",")]
    proc, urls = start_sim(args.profile, args.time_scale, args.pods)
    try:
        print(f"profile {p.name} ({p.gpu}), {args.pods} pod(s) in one simulator process (pid {proc.pid}), "
              f"time_scale {args.time_scale}, prompt {args.prompt_tokens} tok, output ~{args.max_tokens} tok "
              f"(0.5x-1.5x), {args.duration:g} s per level; conc = clients per pod, tok/s = all pods")  # fmt: skip
        print()
        hdr = (
            "| conc | reqs | tok/s meas | tok/s exp | TTFT p50 ms | TTFT p99 ms | TTFT exp ms "
            "| ITL p50 ms | ITL p99 ms | ITL exp ms | TPOT p50 ms | TPOT exp ms | sim CPU % |"
        )
        print(hdr)
        print("|" + "---|" * (hdr.count("|") - 1))
        for c in levels:
            r = await run_level(urls, proc.pid, c, args.duration, args.prompt_tokens, args.max_tokens)
            tput, ttft, itl, tpot = expected(p, c, args.prompt_tokens, args.max_tokens, args.time_scale)
            tput *= args.pods
            print(
                f"| {c} | {r.requests} | {r.output_tokens / r.wall_s:.0f} | {tput:.0f} "
                f"| {1e3 * pct(r.ttfts, 0.5):.1f} | {1e3 * pct(r.ttfts, 0.99):.1f} | {1e3 * ttft:.1f} "
                f"| {1e3 * pct(r.itls, 0.5):.2f} | {1e3 * pct(r.itls, 0.99):.2f} | {1e3 * itl:.2f} "
                f"| {1e3 * pct(r.tpots, 0.5):.2f} | {1e3 * tpot:.2f} "
                f"| {100 * r.cpu_s / r.wall_s:.0f} |" + (f" errors={r.errors}" if r.errors else ""),
                flush=True,
            )
        print()
        print_calibration(args.profile, await calibration(urls[0], p, args.time_scale))
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
    return 0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="fleetgate bench sim-validate", description=__doc__)
    ap.add_argument("--quick", action="store_true", help="three short levels (~10 s in all)")
    ap.add_argument("--profile", default="h100-llama3-8b", help="simulator profile to check")
    ap.add_argument("--pods", type=int, default=1, help="pods in the simulator process (CPU budget check)")
    ap.add_argument("--time-scale", type=float, default=1.0, help=">1 slows every simulated duration")
    ap.add_argument(
        "--concurrency", default="1,4,16,64", help="comma-separated concurrent streams to measure"
    )
    ap.add_argument("--duration", type=float, default=8.0, help="seconds per load level")
    ap.add_argument("--prompt-tokens", type=int, default=512, help="prompt length in tokens (default 512)")
    ap.add_argument("--max-tokens", type=int, default=128, help="tokens generated per request (default 128)")
    args = ap.parse_args(argv)
    if args.quick:
        args.concurrency = "1,8,32" if args.concurrency == "1,4,16,64" else args.concurrency
        args.duration = min(args.duration, 3.0)
    return asyncio.run(main_async(args))


if __name__ == "__main__":
    raise SystemExit(main())
