"""The `faults` section of `bench.global_bench`: Tier 2 under control-plane faults.

Every fault is injected by a loopback TCP relay (bench/tcp_relay.py), never by touching the servers:
  * agents partitioned — two clusters (separate sim + gateway processes) report to a router process
    through the relay; under steady load the relay holds every byte for 30 s (a partition: both
    reports go stale, the gateways keep serving). 20 s into it one cluster is SIGKILLed: a cluster
    really down must still be ejected at once, on request failures alone. Figures: the share of
    requests served during the partition, when the reports went stale, the kill-to-ejection time
    (from /fleet polled every 50 ms), and when reports were fresh again after the partition healed;
  * Redis latency — two limiter replicas (`RedisLimiter`, each with its own pooled client, the
    router's own code) share a 60/min tenant through the relay, which adds 0/50/150/300/600 ms to
    every round trip; 50 concurrent clients hammer it (a refused client waits 100 ms). Admitted vs
    the exact GCRA budget (60 burst + 1/s over the run), the breaker's openings, the adaptive timeout
    reached, and Redis connections opened (redis-server's own counter);
  * Redis unreachable — the same, with the relay resetting every connection (and refusing new ones)
    for 10 s mid-run: `failMode: open` (admitted vs budget over the whole run, and during the
    outage) and `failMode: closed` (503s during the outage).
"""

from __future__ import annotations

import asyncio
import contextlib
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx
import redis.asyncio as aioredis

from bench import procs
from bench.global_bench import HEADERS, MODEL, Row, fleet, progress
from bench.tcp_relay import TcpRelay
from common.config.router import RateLimitSettings, RedisConfig, Tenant
from common.errors import OpenAIError
from global_router.ratelimit import RedisLimiter
from global_router.router import redis_client

LIMIT_PER_MIN = 60
CLIENTS = 50
LATENCIES_MS = (0, 50, 150, 300, 600)


# --- agents partitioned from the router --------------------------------------------------------
async def _partition(quick: bool) -> list[Row]:
    base_s, part_s, kill_after_s, heal_s = (3.0, 30.0, 20.0, 5.0) if quick else (5.0, 30.0, 20.0, 8.0)
    rows: list[Row] = []
    with fleet(["a", "b"]) as f:
        relay = TcpRelay(f.grpc_port)
        rport = relay.start()
        try:
            f.start_cluster("a", pods=2, time_scale=0.05, agent_port=rport)
            b = f.start_cluster("b", pods=2, time_scale=0.05, agent_port=rport)
            f.wait_fresh(["a", "b"])
            progress(
                f"[faults] agents: {base_s:.0f} s baseline, {part_s:.0f} s partition, kill b at +{kill_after_s:.0f} s"
            )
            results: list[tuple[float, int]] = []  # (start, status)
            polls: list[tuple[float, dict[str, Any]]] = []
            t0 = time.monotonic()
            part_at, kill_at_t, heal_at = t0 + base_s, t0 + base_s + kill_after_s, t0 + base_s + part_s
            stop_at = heal_at + heal_s
            async with httpx.AsyncClient(timeout=30, limits=httpx.Limits(max_connections=32)) as c:

                async def worker() -> None:
                    body = {"model": MODEL, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 4}
                    while time.monotonic() < stop_at:
                        s = time.monotonic()
                        try:
                            r = await c.post(
                                f.router_url + "/v1/chat/completions", json=body, headers=HEADERS
                            )
                            results.append((s, r.status_code))
                        except httpx.HTTPError:
                            results.append((s, 0))

                async def poller() -> None:
                    while time.monotonic() < stop_at:
                        with contextlib.suppress(httpx.HTTPError, ValueError):
                            doc = (await c.get(f.router_url + "/fleet")).json()
                            polls.append((time.monotonic(), {x["id"]: x for x in doc["clusters"]}))
                        await asyncio.sleep(0.05)

                async def faults() -> None:
                    await asyncio.sleep(part_at - time.monotonic())
                    progress("[faults] partition: agents cut off from the router")
                    relay.set(mode="partition")
                    await asyncio.sleep(kill_at_t - time.monotonic())
                    progress("[faults] SIGKILL cluster b (gateway and pods)")
                    await asyncio.to_thread(b.kill)
                    await asyncio.sleep(heal_at - time.monotonic())
                    progress("[faults] partition healed")
                    relay.set(mode="up")

                await asyncio.gather(*(worker() for _ in range(12)), poller(), faults())
        finally:
            relay.stop()

    def served(lo: float, hi: float) -> tuple[int, int]:
        window = [st for s, st in results if lo <= s < hi]
        return sum(1 for st in window if st == 200), len(window)

    ok_b, n_b = served(t0, part_at)
    ok_p, n_p = served(part_at, heal_at)
    ok_pk, n_pk = served(part_at, kill_at_t)
    stale_at = next((t for t, cs in polls if t > part_at and all(x["stale"] for x in cs.values())), None)
    ejected_at = next(
        (t for t, cs in polls if t > kill_at_t and cs.get("b", {}).get("ejected_for_s", 0) > 0), None
    )
    fresh_again = next((t for t, cs in polls if t > heal_at and cs.get("a", {}).get("fresh")), None)
    rows += [
        Row("faults", "agents partitioned: baseline served", f"{ok_b} / {n_b}", "before the partition"),
        Row(
            "faults",
            "agents partitioned 30 s: served",
            f"{ok_p} / {n_p} ({100 * ok_p / max(1, n_p):.2f}%)",
            f"all reports stale; b killed at +{kill_after_s:.0f} s (before the kill: {ok_pk} / {n_pk})",
        ),
        Row(
            "faults",
            "reports stale after (s)",
            "-" if stale_at is None else f"{stale_at - part_at:.2f}",
            "staleAfterS 1.5; still routed to",
        ),
        Row(
            "faults",
            "dead cluster ejected after its kill (s)",
            "never" if ejected_at is None else f"{ejected_at - kill_at_t:.2f}",
            "on request failures alone (its report said it was fine); /fleet polled every 50 ms",
        ),
        Row(
            "faults",
            "reports fresh again after healing (s)",
            "-" if fresh_again is None else f"{fresh_again - heal_at:.2f}",
            "agents' reconnect backoff",
        ),
    ]
    return rows


# --- Redis latency and outage --------------------------------------------------------------------
async def _connections(direct: aioredis.Redis) -> int:
    info = await direct.info("stats")
    return int(info["total_connections_received"])


async def _limiter_run(
    relay: TcpRelay,
    direct: aioredis.Redis,
    tenant: Tenant,
    *,
    fail_mode: str,
    seconds: float,
    outage: tuple[float, float] | None = None,
) -> dict[str, Any]:
    url = f"redis://127.0.0.1:{relay.port}/0"
    cfg = RedisConfig(url=url, fail_mode=fail_mode)  # type: ignore[arg-type]
    conns0 = await _connections(direct)
    clients = [redis_client(url, cfg.max_timeout_s + 0.5, cfg.max_connections) for _ in range(2)]
    reps = [RedisLimiter(cl, cfg, RateLimitSettings(), replica_id=f"r{i}") for i, cl in enumerate(clients)]
    for r in reps:
        await r.start()
    for r in reps:
        await r.replicas.announce()  # both know there are two before the load starts
    admitted: list[float] = []
    closed_refusals: list[float] = []
    lat: list[float] = []
    t0 = time.monotonic()
    stop_at = t0 + seconds

    async def client(i: int) -> None:
        lim = reps[i % 2]
        while time.monotonic() < stop_at:
            s = time.perf_counter()
            try:
                adm = await lim.admit(tenant, 1)
            except OpenAIError as exc:
                if exc.status != 429:
                    closed_refusals.append(time.monotonic())
                await asyncio.sleep(0.1)
                continue
            lat.append(time.perf_counter() - s)
            admitted.append(time.monotonic())
            await lim.complete(adm, 1)

    async def injector() -> None:
        if outage is None:
            return
        await asyncio.sleep(outage[0])
        await asyncio.to_thread(relay.set, mode="down")
        await asyncio.sleep(outage[1])
        await asyncio.to_thread(relay.set, mode="up")

    await asyncio.gather(*(client(i) for i in range(CLIENTS)), injector())
    elapsed = time.monotonic() - t0
    stats = [r.stats() for r in reps]
    for r in reps:
        await r.stop()
    for cl in clients:
        await cl.aclose()
    opened = sum(int(s["breaker_opened"] or 0) for s in stats)
    lat.sort()
    out: dict[str, Any] = {
        "admitted": len(admitted),
        "budget": LIMIT_PER_MIN + LIMIT_PER_MIN / 60.0 * elapsed,
        "elapsed": elapsed,
        "opened": opened,
        "timeout_ms": max(float(s["timeout_ms"] or 0) for s in stats),
        "conns": await _connections(direct) - conns0,
        "p50_ms": lat[len(lat) // 2] * 1000 if lat else 0.0,
        "closed_refusals": len(closed_refusals),
    }
    if outage is not None:
        lo, hi = t0 + outage[0], t0 + outage[0] + outage[1]
        out["admitted_in_outage"] = sum(1 for t in admitted if lo <= t < hi)
        out["budget_in_outage"] = LIMIT_PER_MIN / 60.0 * outage[1]
    return out


def _over(admitted: int, budget: float) -> str:
    return f"{(admitted - budget) / budget * 100:+.1f}%"


async def _redis(quick: bool) -> list[Row]:
    rows: list[Row] = []
    run_s = 8.0 if quick else 12.0
    with tempfile.TemporaryDirectory() as tmp:
        try:
            srv = procs.start_redis(Path(tmp))
        except FileNotFoundError:
            return [Row("faults", "redis sections skipped", "-", "redis-server not installed")]
        relay = TcpRelay(srv.port)
        relay.start()
        direct = aioredis.Redis.from_url(srv.url)
        try:
            for ms in LATENCIES_MS:
                progress(
                    f"[faults] Redis +{ms} ms: 2 replicas, {CLIENTS} clients, {LIMIT_PER_MIN}/min, {run_s:.0f} s"
                )
                relay.set(mode="up", delay_s=ms / 1000.0)
                tenant = Tenant(name=f"lat-{ms}", api_key_sha256=[], requests_per_minute=LIMIT_PER_MIN)
                r = await _limiter_run(relay, direct, tenant, fail_mode="open", seconds=run_s)
                rows.append(
                    Row(
                        "faults",
                        f"Redis +{ms} ms: admitted vs budget",
                        f"{r['admitted']} vs {r['budget']:.1f} ({_over(r['admitted'], r['budget'])})",
                        f"breaker opened {r['opened']}x; timeout reached {r['timeout_ms']:.0f} ms; "
                        f"admit p50 {r['p50_ms']:.0f} ms; {r['conns']} Redis connections opened",
                    )
                )
            relay.set(mode="up", delay_s=0.0)
            down_s, start_s = 10.0, 4.0
            total_s = start_s + down_s + (4.0 if quick else 8.0)
            for mode in ("open", "closed"):
                progress(f"[faults] Redis unreachable {down_s:.0f} s, failMode {mode}, {total_s:.0f} s run")
                tenant = Tenant(name=f"down-{mode}", api_key_sha256=[], requests_per_minute=LIMIT_PER_MIN)
                r = await _limiter_run(
                    relay, direct, tenant, fail_mode=mode, seconds=total_s, outage=(start_s, down_s)
                )
                note = (
                    f"during the outage {r['admitted_in_outage']} admitted vs {r['budget_in_outage']:.0f} "
                    f"refilled; breaker opened {r['opened']}x; {r['conns']} Redis connections opened"
                )
                if mode == "closed":
                    note += f"; {r['closed_refusals']} refused with 503 (rate_limiter_unavailable)"
                rows.append(
                    Row(
                        "faults",
                        f"Redis unreachable 10 s, failMode {mode}: admitted vs budget",
                        f"{r['admitted']} vs {r['budget']:.1f} ({_over(r['admitted'], r['budget'])})",
                        note,
                    )
                )
        finally:
            await direct.aclose()
            relay.stop()
            srv.stop()
    return rows


async def section_faults(quick: bool, plot_dir: Path | None = None, stem: str = "global") -> list[Row]:
    rows = await _redis(quick)
    rows += await _partition(quick)
    return rows
