"""`fleetgate bench global --section netns`: the global tier measured over emulated WAN links in
network namespaces (fleetgate/netbed): per-region latency, rate-limit accuracy across two replicas
whose Redis is a WAN hop away, and failover when a region's cluster dies under load.

Needs root and iproute2; without them the section reports one `skipped` row with the reason.
"""

from __future__ import annotations

import asyncio
import shutil
import signal
import sys
import tempfile
import time
from pathlib import Path

import httpx

from bench.stats import percentile
from fleetgate.netbed import netns
from fleetgate.netbed.bed import MODEL, ClusterPlan, Testbed, Topology

Measured = tuple[str, str, str]  # metric, value, note
REGION_MS = {"us-east": 20.0, "eu-west": 60.0}
HOME = {"us-east": "use1", "eu-west": "euw1"}


def _progress(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def _body(max_tokens: int = 8) -> dict[str, object]:
    return {"model": MODEL, "messages": [{"role": "user", "content": "ping"}], "max_tokens": max_tokens}


async def _latency(bed: Testbed, n: int) -> list[Measured]:
    rows: list[Measured] = []
    async with bed.client(bed.ingress()) as client:
        for region, home in HOME.items():
            ms, at_home = [], 0
            for _ in range(n):
                t0 = time.perf_counter()
                r = await client.post("/v1/chat/completions", json=_body(), headers=bed.auth(region=region))
                if r.status_code == 200:
                    ms.append((time.perf_counter() - t0) * 1000)
                    at_home += r.headers.get("x-fleetgate-cluster") == home
            rtt = 2 * REGION_MS[region]
            rows.append(
                (
                    f"{region} clients: p50 / p90 ms, served at home",
                    f"{percentile(ms, 50):.0f} / {percentile(ms, 90):.0f}, {at_home}/{n}",
                    f"home RTT {rtt:.0f} ms; keep-alive",
                )
            )
    return rows


async def _limits(bed: Testbed, seconds: float) -> list[Measured]:
    limit = bed.topo.limited_rpm
    counts = {"ok": 0, "429": 0, "other": 0}
    stop_at = time.monotonic() + seconds
    headers = {"authorization": f"Bearer {bed.limited_key}"}

    async def worker(client: httpx.AsyncClient) -> None:
        while time.monotonic() < stop_at:
            r = await client.post("/v1/chat/completions", json=_body(1), headers=headers)
            key = "ok" if r.status_code == 200 else "429" if r.status_code == 429 else "other"
            counts[key] += 1

    async with bed.client(bed.ingress(0)) as c0, bed.client(bed.ingress(1)) as c1:
        t0 = time.monotonic()
        await asyncio.gather(*(worker(c) for c in (c0, c1) for _ in range(4)))
        took = time.monotonic() - t0
    allowed = (
        limit + limit * took / 60.0
    )  # GCRA: a burst of one minute's limit from idle, then limit/60 per s
    return [
        (
            f"limit {limit}/min over 2 replicas, {took:.0f} s: admitted / allowed",
            f"{counts['ok']} / {allowed:.0f} ({counts['ok'] / allowed:.2f}x)",
            f"allowed = burst {limit} + {limit}/60 per s; {counts['429']} answered 429, {counts['other']} other",
        )
    ]


async def _failover(bed: Testbed, run_s: float, kill_at: float) -> list[Measured]:
    results: list[tuple[float, float, int, str]] = []
    t0 = time.monotonic()
    stop_at = t0 + run_s
    killed_at = 0.0
    async with bed.client(bed.ingress(), keepalive=False) as client:

        async def worker() -> None:
            while time.monotonic() < stop_at:
                s = time.monotonic()
                try:
                    r = await client.post(
                        "/v1/chat/completions", json=_body(16), headers=bed.auth(region="us-east")
                    )
                    results.append(
                        (s, time.monotonic(), r.status_code, r.headers.get("x-fleetgate-cluster", ""))
                    )
                except httpx.HTTPError:
                    results.append((s, time.monotonic(), 0, ""))

        async def killer() -> None:
            nonlocal killed_at
            await asyncio.sleep(kill_at)
            killed_at = time.monotonic()
            _progress("[netns] SIGKILL use1 (gateway and pods)")
            for name in ("gw-use1", "sim-use1"):
                await asyncio.to_thread(bed.procs[name].stop, signal.SIGKILL)

        await asyncio.gather(*(worker() for _ in range(8)), killer())
    lost = [r for r in results if r[2] != 200]
    moved = min(
        (s for s, _, st, c in results if s > killed_at and st == 200 and c == "euw1"), default=killed_at
    )
    last_hit = max(
        (e for s, e, st, c in results if s > killed_at and (c == "use1" or st != 200)), default=killed_at
    )
    before = [(e - s) * 1000 for s, e, st, _ in results if e < killed_at and st == 200]
    after = [(e - s) * 1000 for s, e, st, _ in results if s > last_hit and st == 200]
    return [
        ("failover: requests / lost", f"{len(results)} / {len(lost)}", "us-east clients; lost = any non-200"),
        ("failover: first request served by eu-west after (s)", f"{moved - killed_at:.2f}", "after the kill"),
        ("failover: last request touching use1 ended after (s)", f"{last_hit - killed_at:.2f}", ""),
        (
            "failover: p50 ms before / after",
            f"{percentile(before, 50):.0f} / {percentile(after, 50):.0f}",
            "us-east 20 ms -> eu-west 60 ms one way",
        ),
    ]


async def measure(quick: bool) -> list[Measured]:
    reason = netns.unavailable_reason()
    if reason is not None:
        return [("skipped", "-", reason)]
    netns.remove_orphans()
    topo = Topology(
        (ClusterPlan("use1", "us-east"), ClusterPlan("euw1", "eu-west")), REGION_MS, limited_rpm=300
    )
    workdir = Path(tempfile.mkdtemp(prefix="fleetgate-bench-netns-"))
    bed = Testbed(topo, workdir)
    try:
        _progress("[netns] building the namespaces and starting the fleet")
        t = time.monotonic()
        await asyncio.to_thread(bed.start)
        rows: list[Measured] = [
            ("bed start (s)", f"{time.monotonic() - t:.1f}", "2 clusters, 2 replicas, Redis")
        ]
        _progress("[netns] latency per client region")
        rows += await _latency(bed, 20 if quick else 60)
        _progress("[netns] rate-limit accuracy across replicas")
        rows += await _limits(bed, 10.0 if quick else 30.0)
        _progress("[netns] failover under load")
        rows += await _failover(bed, *((8.0, 3.0) if quick else (15.0, 5.0)))
        return rows
    finally:
        problems = await asyncio.to_thread(bed.close)
        shutil.rmtree(workdir, ignore_errors=True)
        if problems:
            _progress(f"[netns] teardown problems: {problems}")
