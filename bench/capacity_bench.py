"""Capacity protocol costs: building a report, the router's report throughput, Redis fan-out delay.

1. `build_report` time for pools of 10 / 100 / 1000 pods (the agent pays it every interval).
2. CapacityServer throughput: K authenticated agent streams on loopback, each sending the next report
   as soon as the previous one is acknowledged, for D seconds; reports/s and ack round-trip
   percentiles, with the in-process fleet view and (if redis-server is installed) the Redis one.
3. Redis fleet view: delay from `publish` on one replica until another replica's cache has it.

    fleetgate bench capacity [--quick]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import random
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import AsyncIterator, Sequence

import grpc
import redis.asyncio as aioredis

from cluster_gateway.agent.aggregate import build_report
from cluster_gateway.pool import Endpoint, EndpointPool, PodMetrics
from common.config.gateway import Discovery, GatewaySpec, Saturation, StaticDiscovery
from common.config.router import AgentAuth
from common.config.router import CapacityServer as CapacityServerConfig
from common.proto.fleetgate.v1 import capacity_pb2, capacity_pb2_grpc
from global_router.agent_auth import hash_token
from global_router.capacity_server import CapacityServer
from global_router.fleet_view import ClusterState, FleetView, MemoryFleetView, RedisFleetView

MODELS = ["llama-3.1-8b", "qwen-2.5-7b"]
ADAPTERS = [f"lora-{i}" for i in range(8)]


def _pool(n: int, rng: random.Random) -> EndpointPool:
    pool = EndpointPool()
    now = time.monotonic()
    for i in range(n):
        name = f"pod-{i}"
        pool.upsert(Endpoint(name=name, address="10.0.0.1", port=8000 + i))
        base = MODELS[i % len(MODELS)]
        pool.set_models(name, {base, *rng.sample(ADAPTERS, 3)})
        pool.record_scrape(
            name,
            PodMetrics(
                engine="vllm",
                waiting=rng.randint(0, 8),
                running=rng.randint(0, 40),
                kv_usage=rng.random(),
                running_adapters=frozenset(rng.sample(ADAPTERS, 2)),
                max_lora=4,
                scraped_at=now,
            ),
        )
    return pool


def bench_build_report(sizes: Sequence[int], reps: int) -> list[str]:
    spec = GatewaySpec(discovery=Discovery(static=StaticDiscovery()))
    sat = Saturation()
    rows = ["| pods | build_report µs (median) |", "| ---: | ---: |"]
    for n in sizes:
        pool = _pool(n, random.Random(n))
        times = []
        for seq in range(reps):
            t0 = time.perf_counter()
            build_report(spec, pool, seq + 1, sat)
            times.append(time.perf_counter() - t0)
        rows.append(f"| {n} | {statistics.median(times) * 1e6:.0f} |")
    return rows


async def _stream(port: int, token: str, cluster: str, until: float, rtts: list[float]) -> int:
    sent = 0
    async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as ch:
        call = capacity_pb2_grpc.CapacityServiceStub(ch).Report(
            metadata=(("authorization", f"Bearer {token}"),)
        )
        model = capacity_pb2.ModelCapacity(model="m", ready_pods=4, kv_headroom=0.5, headroom_requests=10)
        while time.monotonic() < until:
            sent += 1
            report = capacity_pb2.CapacityReport(
                cluster_id=cluster, gateway_url="http://gw:8080", sequence=sent, models=[model]
            )
            t0 = time.perf_counter()
            await call.write(report)
            await call.read()
            rtts.append(time.perf_counter() - t0)
        await call.done_writing()
    return sent


async def bench_server(fleet: FleetView, streams: int, seconds: float) -> str:
    tokens = {f"c{i}": f"token-{i}" for i in range(streams)}
    cfg = CapacityServerConfig(
        port=0,
        agents=[
            AgentAuth(cluster_id=c, token_sha256=hash_token(t), gateway_hosts=["gw"])
            for c, t in tokens.items()
        ],
    )
    server = CapacityServer(cfg, fleet)
    port = await server.start()
    try:
        rtts: list[float] = []
        t0 = time.monotonic()
        until = t0 + seconds
        counts = await asyncio.gather(*(_stream(port, t, c, until, rtts) for c, t in tokens.items()))
        elapsed = time.monotonic() - t0
    finally:
        await server.stop()
    rtts.sort()
    p50 = rtts[len(rtts) // 2] * 1000
    p99 = rtts[min(len(rtts) - 1, int(len(rtts) * 0.99))] * 1000
    return f"| {streams} | {sum(counts) / elapsed:.0f} | {p50:.2f} | {p99:.2f} |"


def _spawn_redis(exe: str, port: int, tmp: str) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [exe, "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no", "--dir", tmp],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )


@contextlib.asynccontextmanager
async def _redis() -> AsyncIterator[str | None]:
    exe = shutil.which("redis-server")
    if exe is None:
        yield None
        return
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    with tempfile.TemporaryDirectory() as tmp:
        proc = _spawn_redis(exe, port, tmp)
        try:
            deadline = time.monotonic() + 10
            while True:
                try:
                    with socket.create_connection(("127.0.0.1", port), timeout=0.2):
                        break
                except OSError:
                    if time.monotonic() > deadline:
                        raise
                    await asyncio.sleep(0.05)
            yield f"redis://127.0.0.1:{port}/0"
        finally:
            proc.terminate()
            proc.wait(timeout=10)


async def bench_propagation(url: str, n: int) -> str:
    ca, cb = aioredis.Redis.from_url(url), aioredis.Redis.from_url(url)
    a = RedisFleetView(ca, prefix="bench:", ttl_s=30)
    b = RedisFleetView(cb, prefix="bench:", ttl_s=30)
    await a.start()
    await b.start()
    delays = []
    try:
        for i in range(1, n + 1):
            state = ClusterState(
                "c", "r", "", "http://gw:8080", i, time.time(), {}, 1.0, 1, "on-demand", False
            )
            t0 = time.perf_counter()
            await a.publish(state)
            while True:  # spin on the cache: the delay measured is the fan-out itself
                got = b.get("c")
                if got is not None and got.seq == i:
                    break
                await asyncio.sleep(0)
            delays.append(time.perf_counter() - t0)
    finally:
        await a.stop()
        await b.stop()
        await ca.aclose()
        await cb.aclose()
    delays.sort()
    return (
        f"publish on replica A → visible on replica B: p50 {delays[len(delays) // 2] * 1000:.2f} ms, "
        f"p99 {delays[int(len(delays) * 0.99)] * 1000:.2f} ms over {n} reports"
    )


async def amain(quick: bool) -> None:
    reps = 50 if quick else 300
    print("## build_report\n")
    print("\n".join(bench_build_report([10, 100, 1000], reps)))
    seconds = 2.0 if quick else 5.0
    streams = [1, 20] if quick else [1, 20, 100]
    header = ["| streams | reports/s | ack RTT p50 ms | ack RTT p99 ms |", "| ---: | ---: | ---: | ---: |"]
    print("\n## CapacityServer, in-process fleet view\n")
    print("\n".join(header))
    for k in streams:
        print(await bench_server(MemoryFleetView(), k, seconds), flush=True)
    async with _redis() as url:
        if url is None:
            print("\n(redis-server not installed: Redis sections skipped)")
            return
        print("\n## CapacityServer, Redis fleet view\n")
        print("\n".join(header))
        for k in streams:
            client = aioredis.Redis.from_url(url)
            view = RedisFleetView(client, prefix="benchsrv:", ttl_s=30)
            await view.start()
            try:
                print(await bench_server(view, k, seconds), flush=True)
            finally:
                await view.stop()
                await client.aclose()
        print("\n## Redis fleet view fan-out\n")
        print(await bench_propagation(url, 200 if quick else 1000))


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="fleetgate bench capacity", description=__doc__)
    parser.add_argument("--quick", action="store_true", help="shorter runs")
    args = parser.parse_args(argv)
    asyncio.run(amain(args.quick))
    return 0


if __name__ == "__main__":
    sys.exit(main())
