"""What the global router costs and what it buys: `fleetgate bench global [--quick] [--section S]`.

Every server is a separate process, as in production (`fleetgate sim`, `fleetgate gateway` with its
capacity agent, `fleetgate global-router`); this process is only the client. Sections:
  * hop — the global hop's added latency: the same requests straight to a cluster gateway and through
    the router, alternating so both see the same machine load (non-streaming total time, streaming
    time-to-first-byte), and max requests/s through each at a fixed concurrency;
  * failover — two clusters under steady load, one killed (SIGKILL: gateway and pods) mid-run:
    requests lost, how long first attempts still hit the dead cluster, latency before/after;
  * ratelimit — the Redis Lua admission (one round trip per request) vs the in-process limiter:
    latency, throughput, and the admitted count of two replicas sharing one limit vs the exact budget;
  * cost — batch shaping vs a cost-blind baseline on three priced clusters: batch tokens and $ per
    cluster, cost saved, interactive TTFT kept (details and the cost definition: bench/global_cost.py);
  * faults — control-plane faults: every agent partitioned from the router for 30 s (and a cluster
    killed meanwhile), Redis latency 0-600 ms and Redis unreachable for 10 s, admitted vs budget
    (details: bench/global_faults.py).
Writes the table to bench/results/global.md (`--out` overrides) and plots next to it
(`<stem>_failover.png`, `<stem>_cost.png`); progress goes to stderr.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import re
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import yaml

from bench import procs, report
from bench.stats import percentile
from global_router.tenants import hash_key

MODEL = "meta-llama/Llama-3.1-8B-Instruct"
API_KEY = "sk-bench"


def progress(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


pct = percentile  # one nearest-rank definition for every bench


@dataclass
class Row:
    section: str
    metric: str
    value: str
    note: str = ""


# --- processes (helpers: bench/procs.py) -------------------------------------------------------
@dataclass
class Cluster:
    cluster_id: str
    sim: subprocess.Popen[str]
    gateway: subprocess.Popen[str]
    url: str

    def kill(self) -> None:
        for p in (self.gateway, self.sim):
            procs.stop(p, signal.SIGKILL)


def write_gateway_config(
    tmp: Path,
    cid: str,
    urls: list[str],
    grpc_port: int,
    cost: float = 2.5,
    capacity_type: str = "on-demand",
    *,
    scrape_interval_ms: int = 50,
    report_interval_ms: int = 250,
    hmac_secret: Path | None = None,
) -> Path:
    """A cluster gateway spec over static pod URLs whose capacity agent reports to the router's gRPC
    port with token `tok-<cid>` (the token `router_config` lists for it); returns the YAML's path.
    The intervals default to this bench's fast ones (failover in seconds, not the production 1 s)."""
    (tmp / f"{cid}.token").write_text(f"tok-{cid}")
    spec = {
        "clusterId": cid,
        "region": "bench",
        "discovery": {"static": {"endpoints": urls}},
        "scrape": {"intervalMs": scrape_interval_ms},
        "globalRouter": {
            "address": f"127.0.0.1:{grpc_port}",
            "tokenFile": str(tmp / f"{cid}.token"),
            "reportIntervalMs": report_interval_ms,
        },
        "capacity": {"costPerGpuHour": cost, "capacityType": capacity_type},
    }
    if hmac_secret is not None:  # the router signs each request; the gateway verifies (docs/security.md)
        spec["auth"] = {"mode": "hmac", "secretFile": str(hmac_secret)}
    path = tmp / f"{cid}.yaml"
    path.write_text(yaml.safe_dump(spec))
    return path


def router_config(
    cluster_ids: list[str],
    *,
    tenants: list[dict[str, Any]] | None = None,
    selection: dict[str, Any] | None = None,
    report_interval_ms: int = 250,
    stale_after_s: float = 1.5,
    hmac_secrets: dict[str, Path] | None = None,
) -> dict[str, Any]:
    """The router config (camelCase) accepting an agent per cluster id; default one tenant, API_KEY."""
    cfg: dict[str, Any] = {
        "capacity": {
            "reportIntervalMs": report_interval_ms,
            "staleAfterS": stale_after_s,
            "agents": [
                # pinned to loopback, allowed explicitly (docs/security.md)
                {
                    "clusterId": c,
                    "tokenSha256": hash_key(f"tok-{c}"),
                    "gatewayHosts": ["127.0.0.1"],
                    "allowLoopback": True,
                    **(
                        {"gatewayAuth": {"mode": "hmac", "secretFile": str(hmac_secrets[c])}}
                        if hmac_secrets and c in hmac_secrets
                        else {}
                    ),
                }
                for c in cluster_ids
            ],
        },
        "tenants": tenants or [{"name": "bench", "apiKeySha256": [hash_key(API_KEY)]}],
        "failover": {"ejectAfterFailures": 2, "ejectBaseS": 5, "connectTimeoutS": 1.0},
        "publicStatus": True,  # the bench samples /fleet (public: without gateway URLs)
    }
    if selection is not None:
        cfg["selection"] = selection
    return cfg


def wait_fresh(router_url: str, ids: list[str], model: str, deadline: float) -> None:
    """Poll the router's /fleet until every cluster in `ids` is fresh with a ready pod for `model`
    (`deadline` on the monotonic clock)."""
    while time.monotonic() < deadline:
        try:
            fleet = httpx.get(f"{router_url}/fleet", timeout=2).json()
            ready = {
                c["id"]
                for c in fleet["clusters"]
                if c["fresh"] and c["models"].get(model, {}).get("ready_pods")
            }
            if set(ids) <= ready:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.1)
    raise RuntimeError(f"clusters {ids} never became fresh at the router")


class Fleet:
    """A router process and cluster processes reporting to it, in a temp dir."""

    def __init__(self, tmp: Path) -> None:
        self.tmp = tmp
        self.router: subprocess.Popen[str] | None = None
        self.router_url = ""
        self.grpc_port = 0
        self.clusters: list[Cluster] = []

    def start_cluster(
        self,
        cid: str,
        pods: int,
        time_scale: float,
        cost: float = 2.5,
        *,
        profile: str = "tiny",
        capacity_type: str = "on-demand",
        agent_port: int | None = None,
    ) -> Cluster:
        """`agent_port`: where the agent reports (a fault-injecting relay); default the router's."""
        sim = procs.spawn(
            "sim", "--pods", str(pods), "--base-port", "0", "--profile", profile,
            "--time-scale", str(time_scale), "--seed", str(len(self.clusters)), "--log-level", "warning",
        )  # fmt: skip
        urls = procs.expect(sim.stdout, r"listening on (http://\S+)", pods)
        path = write_gateway_config(self.tmp, cid, urls, agent_port or self.grpc_port, cost, capacity_type)
        gw = procs.spawn("gateway", "--config", str(path), "--port", "0", "--log-format", "text")
        port = procs.expect(gw.stderr, r"listening on http://127\.0\.0\.1:(\d+)", 1)[0]
        procs.drain_in_background(sim.stdout, sim.stderr, gw.stdout, gw.stderr)
        c = Cluster(cid, sim, gw, f"http://127.0.0.1:{port}")
        self.clusters.append(c)
        return c

    def wait_fresh(self, ids: list[str], timeout: float = 30.0) -> None:
        deadline = time.monotonic() + timeout
        wait_fresh(self.router_url, ids, MODEL, deadline)

    def stop(self) -> None:
        for c in self.clusters:
            procs.stop(c.gateway)
            procs.stop(c.sim)
        if self.router is not None:
            procs.stop(self.router)


@contextlib.contextmanager
def fleet(
    cluster_ids: list[str],
    *,
    tenants: list[dict[str, Any]] | None = None,
    selection: dict[str, Any] | None = None,
) -> Iterator[Fleet]:
    """`tenants`/`selection`: router config sections (camelCase); default one tenant keyed API_KEY."""
    with tempfile.TemporaryDirectory(prefix="fleetgate-bench-") as tmp:
        f = Fleet(Path(tmp))
        try:
            path = f.tmp / "router.yaml"
            path.write_text(yaml.safe_dump(router_config(cluster_ids, tenants=tenants, selection=selection)))
            grpc_port = procs.free_port()
            f.router = procs.spawn(
                "global-router", "--config", str(path), "--port", "0", "--grpc-port", str(grpc_port),
                "--log-format", "text",
            )  # fmt: skip
            f.router_url = procs.expect(f.router.stderr, r"global router listening on (http://\S+)", 1)[0]
            procs.drain_in_background(f.router.stdout, f.router.stderr)
            f.grpc_port = grpc_port
            yield f
        finally:
            f.stop()


def _body(stream: bool = False, max_tokens: int = 1) -> dict[str, Any]:
    return {
        "model": MODEL,
        "messages": [{"role": "user", "content": "ping"}],
        "max_tokens": max_tokens,
        "stream": stream,
    }


HEADERS = {"authorization": f"Bearer {API_KEY}"}


async def _timed(c: httpx.AsyncClient, url: str, stream: bool) -> float:
    t0 = time.perf_counter()
    if not stream:
        r = await c.post(url + "/v1/chat/completions", json=_body(), headers=HEADERS)
        r.raise_for_status()
        return time.perf_counter() - t0
    async with c.stream("POST", url + "/v1/chat/completions", json=_body(True, 8), headers=HEADERS) as r:
        r.raise_for_status()
        ttfb: float | None = None
        async for _ in r.aiter_raw():
            if ttfb is None:
                ttfb = time.perf_counter() - t0
    if ttfb is None:
        raise RuntimeError("empty stream")
    return ttfb


async def _max_rps(url: str, concurrency: int, seconds: float) -> tuple[float, int]:
    done = errors = 0
    stop_at = time.monotonic() + seconds
    async with httpx.AsyncClient(timeout=30, limits=httpx.Limits(max_connections=concurrency)) as c:

        async def worker() -> None:
            nonlocal done, errors
            while time.monotonic() < stop_at:
                r = await c.post(url + "/v1/chat/completions", json=_body(), headers=HEADERS)
                done += 1
                errors += r.status_code != 200

        t0 = time.monotonic()
        await asyncio.gather(*(worker() for _ in range(concurrency)))
        return done / (time.monotonic() - t0), errors


# --- sections ----------------------------------------------------------------------------------
async def section_hop(quick: bool, plot_dir: Path | None = None, stem: str = "global") -> list[Row]:
    n = 100 if quick else 400
    rows: list[Row] = []
    with fleet(["hop"]) as f:
        gw = f.start_cluster("hop", pods=2, time_scale=0.01)
        f.wait_fresh(["hop"])
        async with httpx.AsyncClient(timeout=30) as c:
            for stream in (False, True):
                progress(f"[hop] {'streaming' if stream else 'non-streaming'}: {n} requests each way")
                for _ in range(20):  # warm both paths' connection pools
                    await _timed(c, gw.url, stream)
                    await _timed(c, f.router_url, stream)
                direct: list[float] = []
                routed: list[float] = []
                for _ in range(n):
                    direct.append(await _timed(c, gw.url, stream))
                    routed.append(await _timed(c, f.router_url, stream))
                what = "streaming TTFB" if stream else "non-streaming"
                for q in (50, 99):
                    d, r = pct(direct, q) * 1e3, pct(routed, q) * 1e3
                    rows.append(
                        Row(
                            "hop", f"{what} p{q} (ms)", f"{r:.2f} vs {d:.2f}", f"added {r - d:+.2f} ms, n={n}"
                        )
                    )
        secs = 2.0 if quick else 5.0
        for name, url in (("gateway direct", gw.url), ("through router", f.router_url)):
            progress(f"[hop] max req/s {name} for {secs:.0f} s")
            rps, errs = await _max_rps(url, 32, secs)
            rows.append(Row("hop", f"max req/s, 32 concurrent, {name}", f"{rps:.0f}", f"{errs} errors"))
    return rows


async def section_failover(quick: bool, plot_dir: Path | None = None, stem: str = "global") -> list[Row]:
    run_s, kill_at = (5.0, 2.0) if quick else (10.0, 4.0)
    rows: list[Row] = []
    with fleet(["victim", "survivor"]) as f:
        victim = f.start_cluster("victim", pods=2, time_scale=0.05)
        f.start_cluster("survivor", pods=2, time_scale=0.05)
        f.wait_fresh(["victim", "survivor"])
        progress(f"[failover] {run_s:.0f} s of load, victim killed at {kill_at:.0f} s")
        results: list[tuple[float, float, int, str]] = []  # (start, end, status, cluster)
        failover_samples: list[tuple[float, float]] = []
        t0 = time.monotonic()
        stop_at = t0 + run_s
        killed_at = 0.0
        async with httpx.AsyncClient(timeout=30, limits=httpx.Limits(max_connections=64)) as c:

            async def worker() -> None:
                while time.monotonic() < stop_at:
                    s = time.monotonic()
                    try:
                        r = await c.post(
                            f.router_url + "/v1/chat/completions", json=_body(max_tokens=16), headers=HEADERS
                        )
                        results.append(
                            (s, time.monotonic(), r.status_code, r.headers.get("x-fleetgate-cluster", "-"))
                        )
                    except httpx.HTTPError:
                        results.append((s, time.monotonic(), 0, "-"))

            async def sampler() -> None:
                rx = re.compile(r"^fleetgate_router_failovers_total\{[^}]*\} (\S+)$", re.M)
                while time.monotonic() < stop_at + 0.5:
                    text = (await c.get(f.router_url + "/metrics")).text
                    failover_samples.append((time.monotonic(), sum(float(v) for v in rx.findall(text))))
                    await asyncio.sleep(0.05)

            async def killer() -> None:
                nonlocal killed_at
                await asyncio.sleep(kill_at)
                killed_at = time.monotonic()
                progress("[failover] SIGKILL victim (gateway and pods)")
                await asyncio.to_thread(victim.kill)

            await asyncio.gather(*(worker() for _ in range(16)), sampler(), killer())
        progress(f"[failover] {len(results)} requests done")
        if plot_dir is not None:
            from bench.plots import failover_timeline, per_second

            path = failover_timeline(
                per_second(results, t0), killed_at - t0, plot_dir / f"{stem}_failover.png"
            )
            progress(f"[failover] wrote {path}")
        lost = [r for r in results if r[2] != 200]
        inflight_at_kill = sum(1 for s, e, _, _ in results if s < killed_at < e)
        final = failover_samples[-1][1] if failover_samples else 0.0
        settled = next((t for t, v in failover_samples if v >= final), killed_at)
        before = [e - s for s, e, st, _ in results if e < killed_at and st == 200]
        after = [e - s for s, e, st, _ in results if s > killed_at + 1.0 and st == 200]
        rows += [
            Row("failover", "requests / lost", f"{len(results)} / {len(lost)}", "lost = any non-200 answer"),
            Row("failover", "in flight at the kill", str(inflight_at_kill), "all retried on the survivor"),
            Row("failover", "failovers (router metric)", f"{final:.0f}", ""),
            Row(
                "failover",
                "traffic moved after (s)",
                f"{max(0.0, settled - killed_at):.2f}",
                "last failover after the kill",
            ),
            Row(
                "failover",
                "latency p50 before / after (ms)",
                f"{pct(before, 50) * 1e3:.0f} / {pct(after, 50) * 1e3:.0f}",
                "",
            ),
            Row(
                "failover",
                "latency p99 before / after (ms)",
                f"{pct(before, 99) * 1e3:.0f} / {pct(after, 99) * 1e3:.0f}",
                "",
            ),
        ]
    return rows


async def section_ratelimit(quick: bool, plot_dir: Path | None = None, stem: str = "global") -> list[Row]:
    import redis.asyncio as aioredis
    from redis.asyncio.retry import Retry
    from redis.backoff import NoBackoff

    from common.config.router import RateLimitSettings, RedisConfig, Tenant
    from common.errors import OpenAIError
    from global_router.ratelimit import LocalLimiter, RedisLimiter

    with redis_server() as url:
        if url is None:
            return [Row("ratelimit", "skipped", "-", "redis-server not installed")]

        def client() -> aioredis.Redis:
            return aioredis.Redis.from_url(url, socket_timeout=1, retry=Retry(NoBackoff(), 0))

        progress("[ratelimit] redis-server up; sequential admissions, then 2 replicas")
        rcfg = RedisConfig(url=url)
        clients = [client(), client()]
        replicas = [RedisLimiter(cl, rcfg, RateLimitSettings()) for cl in clients]
        for r in replicas:
            await r.start()
        rows: list[Row] = []
        n = 2000 if quick else 10000
        big = Tenant(name="lat", api_key_sha256=[], requests_per_minute=10**9, tokens_per_minute=10**12)
        lat: list[float] = []
        for _ in range(n):
            t = time.perf_counter()
            adm = await replicas[0].admit(big, 100)
            await replicas[0].complete(adm, 80)
            lat.append(time.perf_counter() - t)
        rows.append(
            Row(
                "ratelimit",
                "Redis admit+reconcile p50 / p99 (µs)",
                f"{pct(lat, 50) * 1e6:.0f} / {pct(lat, 99) * 1e6:.0f}",
                f"sequential, n={n}",
            )
        )
        local = LocalLimiter()
        t = time.perf_counter()
        for _ in range(n):
            adm = await local.admit(big, 100)
            await local.complete(adm, 80)
        rows.append(
            Row(
                "ratelimit",
                "in-process admit+reconcile (µs)",
                f"{(time.perf_counter() - t) / n * 1e6:.1f}",
                "mean",
            )
        )

        async def hammer(lim: RedisLimiter, tenant: Tenant, count: int) -> int:
            ok = 0
            for _ in range(count):
                try:
                    await lim.admit(tenant, 1)
                    ok += 1
                except OpenAIError:
                    pass
            return ok

        t = time.perf_counter()
        done = await asyncio.gather(*(hammer(replicas[i % 2], big, n // 32) for i in range(64)))
        rate = sum(done) / (time.perf_counter() - t)
        rows.append(
            Row(
                "ratelimit",
                "Redis admissions/s, 2 replicas x 32 concurrent",
                f"{rate:.0f}",
                "one event loop",
            )
        )
        for limit in (600, 6000):
            tenant = Tenant(name=f"exact-{limit}", api_key_sha256=[], requests_per_minute=limit)
            t = time.monotonic()
            got = await asyncio.gather(*(hammer(replicas[i % 2], tenant, limit * 3 // 16) for i in range(16)))
            elapsed = time.monotonic() - t
            budget = limit + limit / 60 * elapsed
            admitted = sum(got)
            rows.append(
                Row(
                    "ratelimit",
                    f"admitted across 2 replicas, limit {limit}/min",
                    f"{admitted} (budget {budget:.1f})",
                    f"{(admitted - budget) / budget * 100:+.2f}% over {elapsed:.2f}s; {limit * 3} attempts",
                )
            )
        for r in replicas:
            await r.stop()
        for cl in clients:
            await cl.aclose()
        return rows


@contextlib.contextmanager
def redis_server() -> Iterator[str | None]:
    """A throwaway redis-server's URL, or None when redis-server is not installed."""
    with tempfile.TemporaryDirectory() as tmp:
        try:
            srv = procs.start_redis(Path(tmp))
        except FileNotFoundError:
            yield None
            return
        try:
            yield srv.url
        finally:
            srv.stop()


async def section_cost(quick: bool, plot_dir: Path | None = None, stem: str = "global") -> list[Row]:
    from bench.global_cost import section_cost as run_cost  # it imports this module

    return await run_cost(quick, plot_dir, stem)


async def section_netns(quick: bool, plot_dir: Path | None = None, stem: str = "global") -> list[Row]:
    """The same questions over emulated WAN links in network namespaces (bench/global_netns.py)."""
    from bench.global_netns import measure

    return [Row("netns", metric, value, note) for metric, value, note in await measure(quick)]


async def section_faults(quick: bool, plot_dir: Path | None = None, stem: str = "global") -> list[Row]:
    from bench.global_faults import section_faults as run_faults  # it imports this module

    return await run_faults(quick, plot_dir, stem)


SECTIONS = {
    "hop": section_hop,
    "failover": section_failover,
    "ratelimit": section_ratelimit,
    "cost": section_cost,
    "netns": section_netns,
    "faults": section_faults,
}


def table(rows: Sequence[Row]) -> str:
    return report.markdown_table(
        ["section", "metric", "value", "note"], ([r.section, r.metric, r.value, r.note] for r in rows)
    )


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="fleetgate bench global", description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true", help="fewer requests, shorter runs")
    ap.add_argument(
        "--section", choices=[*SECTIONS, "all"], default="all", help="run one section only (default all)"
    )
    report.add_output_options(ap, "global", "plots go next to it as <stem>_*.png")
    args = ap.parse_args(argv)
    names = list(SECTIONS) if args.section == "all" else [args.section]
    out = report.output_path(args.out, "global", args.quick)
    plot_dir = None if args.no_plots else out.parent
    rows: list[Row] = []
    for name in names:
        progress(f"== section {name} ({'quick' if args.quick else 'full'})")
        t = time.monotonic()
        rows += asyncio.run(SECTIONS[name](args.quick, plot_dir, out.stem))
        progress(f"== section {name} done in {time.monotonic() - t:.0f} s")
    text = table(rows)
    print(text)
    report.write_results(out, "global", report.module_command("bench.global_bench", argv), text)
    progress(f"wrote {out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
