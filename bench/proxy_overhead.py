"""What the cluster gateway adds on the request path: `fleetgate bench overhead [--quick]`.

Pods (`fleetgate sim`, tiny profile with a small time scale, so model time is negligible) and the
gateway (`fleetgate gateway`) run as separate processes, like in production; this process is only
the client. Sections:
  * added latency, non-streaming and streaming time-to-first-byte: gateway vs. the pod directly
    (requests alternate between the two so both see the same machine load);
  * max requests/s at a fixed concurrency, through the gateway and directly;
  * the ext_proc pick path: a gRPC client playing Envoy (headers + body → destination), and,
    when the envoy binary is present, a full request through Envoy + picker vs. direct;
  * the web-framework choice: a bare ASGI app vs. the same endpoint on litestar.
Writes the table to bench/results/overhead.md (`--out` overrides) and the latency distributions
(direct vs gateway vs Envoy + picker) to `<stem>_latency.png` next to it; progress goes to stderr.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import itertools
import json
import logging
import math
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx

from bench import procs, report
from common.http import Receive, Scope, Send

MODEL = "meta-llama/Llama-3.1-8B-Instruct"

# measurement ("non-streaming" | "streaming TTFB") -> path ("direct to pod", ...) -> seconds
Samples = dict[str, dict[str, list[float]]]


def progress(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def _keep(samples: Samples | None, label: str, path: str, values: list[float]) -> None:
    if samples is not None:
        samples.setdefault(label, {}).setdefault(path, []).extend(values)


def pct(values: Sequence[float], q: float) -> float:
    if not values:
        return math.nan
    s = sorted(values)
    return s[max(0, min(len(s) - 1, math.ceil(q / 100 * len(s)) - 1))]


@dataclass
class Row:
    section: str
    what: str
    p50_ms: float
    p99_ms: float
    note: str = ""


def sample_row(section: str, what: str, seconds: Sequence[float], note: str = "") -> Row:
    """A row of a latency sample's p50 and p99, in ms."""
    return Row(section, what, pct(seconds, 50) * 1e3, pct(seconds, 99) * 1e3, note)


@contextlib.contextmanager
def processes(pods: int) -> Any:
    sim = procs.spawn(
        "sim",
        "--pods",
        str(pods),
        "--base-port",
        "0",
        "--profile",
        "tiny",
        "--time-scale",
        "0.01",
        "--log-level",
        "warning",
    )
    gw: subprocess.Popen[str] | None = None
    try:
        urls = procs.expect(sim.stdout, r"listening on (http://\S+)", pods)
        gw = procs.spawn(
            "gateway",
            "--pods",
            ",".join(urls),
            "--port",
            "0",
            "--extproc-port",
            "0",
            "--log-format",
            "text",
            "--log-level",
            "INFO",
        )
        ports = procs.expect(gw.stderr, r"listening on (?:http://)?127\.0\.0\.1:(\d+)", 2)
        procs.drain_in_background(gw.stderr, gw.stdout, sim.stdout, sim.stderr)
        yield urls, f"http://127.0.0.1:{ports[0]}", int(ports[1]), gw.pid
    finally:
        if gw is not None:
            procs.stop(gw)
        procs.stop(sim)


_seq = itertools.count()


def body(stream: bool = False, max_tokens: int = 1) -> dict[str, Any]:
    # A distinct prompt per request: this bench measures the data path, not prefix-affinity routing
    # (identical prompts would rightly be steered to the pod that cached them).
    return {
        "model": MODEL,
        "messages": [{"role": "user", "content": f"{next(_seq)} ping"}],
        "max_tokens": max_tokens,
        "stream": stream,
    }


async def timed_request(c: httpx.AsyncClient, url: str, stream: bool) -> float:
    """Non-streaming: full response time. Streaming: time to the first body byte."""
    t0 = time.perf_counter()
    if not stream:
        r = await c.post(url + "/v1/chat/completions", json=body())
        r.raise_for_status()
        return time.perf_counter() - t0
    async with c.stream("POST", url + "/v1/chat/completions", json=body(True, 8)) as r:
        r.raise_for_status()
        ttfb = None
        async for _chunk in r.aiter_raw():
            if ttfb is None:
                ttfb = time.perf_counter() - t0
        if ttfb is not None:
            return ttfb
    raise RuntimeError("empty stream")


async def alternate(
    c: httpx.AsyncClient, pods: list[str], url: str, stream: bool, n: int
) -> tuple[list[float], list[float]]:
    """(direct, via `url`) latencies of `n` requests each, alternating so both see the same load.

    Both paths' connections are warmed first, so no connection set-up lands in either sample.
    """
    for _ in range(20):
        await timed_request(c, url, stream)
        await timed_request(c, pods[0], stream)
    direct, via = [], []
    for i in range(n):
        direct.append(await timed_request(c, pods[i % len(pods)], stream))
        via.append(await timed_request(c, url, stream))
    return direct, via


def added_row(section: str, what: str, direct: list[float], via: list[float], note: str) -> Row:
    """What the hop adds at p50 and p99: the via-path percentile minus the direct one."""
    return Row(
        section,
        what,
        (pct(via, 50) - pct(direct, 50)) * 1e3,
        (pct(via, 99) - pct(direct, 99)) * 1e3,
        note,
    )


def stream_label(stream: bool) -> str:
    return "streaming TTFB" if stream else "non-streaming"


async def added_latency(pods: list[str], gw: str, n: int, samples: Samples | None = None) -> list[Row]:
    rows = []
    async with httpx.AsyncClient(timeout=30) as c:
        for stream in (False, True):
            direct, via = await alternate(c, pods, gw, stream, n)
            label = stream_label(stream)
            _keep(samples, label, "direct to pod", direct)
            _keep(samples, label, "via gateway", via)
            rows.append(sample_row("latency", f"{label}: direct to pod", direct))
            rows.append(sample_row("latency", f"{label}: via gateway", via))
            rows.append(added_row("latency", f"{label}: ADDED by gateway", direct, via, f"n={n} sequential"))
    return rows


async def max_rps(targets: list[str], concurrency: int, seconds: float) -> tuple[float, list[float], int]:
    lat: list[float] = []
    errors = 0
    stop_at = time.perf_counter() + seconds
    limits = httpx.Limits(max_connections=concurrency, max_keepalive_connections=concurrency)
    async with httpx.AsyncClient(timeout=30, limits=limits) as c:

        async def worker(i: int) -> None:
            nonlocal errors
            k = i
            while time.perf_counter() < stop_at:
                t0 = time.perf_counter()
                try:
                    r = await c.post(targets[k % len(targets)] + "/v1/chat/completions", json=body())
                    if r.status_code != 200:
                        errors += 1
                except httpx.HTTPError:
                    errors += 1
                lat.append(time.perf_counter() - t0)
                k += 1

        t0 = time.perf_counter()
        await asyncio.gather(*(worker(i) for i in range(concurrency)))
        wall = time.perf_counter() - t0
    return len(lat) / wall, lat, errors


def cpu_seconds(pid: int) -> float:
    """user+system CPU time of a process (Linux /proc), to report CPU per request on a shared box."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


async def throughput(pods: list[str], gw: str, gw_pid: int, concurrency: int, seconds: float) -> list[Row]:
    rows = []
    for name, targets in (("direct to pods (round robin)", pods), ("via gateway", [gw])):
        cpu0 = cpu_seconds(gw_pid)
        rps, lat, errors = await max_rps(targets, concurrency, seconds)
        note = f"{rps:,.0f} req/s at concurrency {concurrency}, {errors} errors"
        if targets == [gw]:
            per_req_ms = (cpu_seconds(gw_pid) - cpu0) / max(1, len(lat)) * 1e3
            note += f"; gateway CPU {per_req_ms:.2f} ms/request (~{1000 / max(per_req_ms, 1e-3):,.0f} req/s per core)"
        rows.append(sample_row("throughput", name, lat, note))
    return rows


async def burst(pods: list[str], gw: str, n: int) -> list[Row]:
    """`n` requests at once (half streaming): the gateway must neither drop nor stall any of them.

    The same burst straight at the pods (round robin) is the reference: with tiny simulated pods
    the pods, not the gateway, set the wall time.
    """
    limits = httpx.Limits(max_connections=n, max_keepalive_connections=n)
    rows = []
    async with httpx.AsyncClient(timeout=120, limits=limits) as c:

        async def one(i: int, url: str) -> tuple[float, bool]:
            t0 = time.perf_counter()
            try:
                r = await c.post(url + "/v1/chat/completions", json=body(stream=i % 2 == 0, max_tokens=8))
                return time.perf_counter() - t0, r.status_code == 200
            except httpx.HTTPError:
                return time.perf_counter() - t0, False

        for name, targets in (("direct to pods (round robin)", pods), ("via gateway", [gw])):
            t0 = time.perf_counter()
            results = await asyncio.gather(*(one(i, targets[i % len(targets)]) for i in range(n)))
            wall = time.perf_counter() - t0
            lat = [d for d, _ in results]
            errors = sum(1 for _, ok in results if not ok)
            note = f"{n - errors} ok, {errors} failed, all done in {wall:.1f} s"
            rows.append(sample_row("burst", f"{n} concurrent requests, {name}", lat, note))
    return rows


async def extproc_pick(port: int, n: int) -> list[Row]:
    import grpc
    from envoy.config.core.v3 import base_pb2
    from envoy.extensions.filters.http.ext_proc.v3 import processing_mode_pb2
    from envoy.service.ext_proc.v3 import external_processor_pb2 as pb
    from envoy.service.ext_proc.v3 import external_processor_pb2_grpc as pb_grpc

    payload = json.dumps(body()).encode()
    hs = {":method": "POST", ":path": "/v1/chat/completions", "content-type": "application/json"}
    headers = pb.ProcessingRequest(
        request_headers=pb.HttpHeaders(
            headers=base_pb2.HeaderMap(
                headers=[base_pb2.HeaderValue(key=k, raw_value=v.encode()) for k, v in hs.items()]
            )
        ),
        protocol_config=pb.ProtocolConfiguration(
            request_body_mode=processing_mode_pb2.ProcessingMode.FULL_DUPLEX_STREAMED
        ),
    )
    body_msg = pb.ProcessingRequest(request_body=pb.HttpBody(body=payload, end_of_stream=True))
    out = []
    async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as ch:
        stub = pb_grpc.ExternalProcessorStub(ch)

        async def one() -> float:
            call = stub.Process()
            t0 = time.perf_counter()
            await call.write(headers)
            await call.write(body_msg)
            first = await call.read()  # the destination (headers answer)
            dt = time.perf_counter() - t0
            assert first.WhichOneof("response") == "request_headers", first
            await call.read()  # the streamed body back
            await call.done_writing()
            while await call.read() is not grpc.aio.EOF:
                pass
            return dt

        for _ in range(20):
            await one()
        out = [await one() for _ in range(n)]
    what = "pick round trip (headers+body → destination)"
    return [sample_row("ext_proc", what, out, f"n={n} sequential, gRPC client as Envoy")]


async def via_envoy(pods: list[str], extproc_port: int, n: int, samples: Samples | None = None) -> list[Row]:
    from cluster_gateway.envoy_front.bootstrap import envoy_bootstrap

    envoy = Path(sys.executable).parent / "envoy"
    binary = str(envoy) if envoy.exists() else shutil.which("envoy")
    if binary is None:
        return [Row("ext_proc", "via Envoy + picker", math.nan, math.nan, "skipped: envoy binary not found")]
    listen, admin = procs.free_port(), procs.free_port()
    with tempfile.TemporaryDirectory() as tmp:
        cfg = Path(tmp) / "envoy.json"
        cfg.write_text(
            json.dumps(envoy_bootstrap(listen_port=listen, extproc_port=extproc_port, admin_port=admin))
        )
        proc = subprocess.Popen(  # noqa: ASYNC220  (spawn only; nothing here waits on it)
            [binary, "-c", str(cfg), "--concurrency", "1", "--disable-hot-restart", "--log-level", "error"],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        try:
            async with httpx.AsyncClient(timeout=30) as c:
                for _ in range(200):
                    with contextlib.suppress(httpx.HTTPError):
                        if (await c.get(f"http://127.0.0.1:{admin}/ready")).status_code == 200:
                            break
                    await asyncio.sleep(0.05)
                url = f"http://127.0.0.1:{listen}"
                rows = []
                for stream in (False, True):
                    direct, via = await alternate(c, pods, url, stream, n)
                    label = stream_label(stream)
                    _keep(samples, label, "via Envoy + picker", via)
                    note = f"n={n}; via Envoy p50 {pct(via, 50) * 1e3:.2f} ms"
                    rows.append(added_row("ext_proc", f"{label}: ADDED by Envoy + picker", direct, via, note))
                return rows
        finally:
            proc.terminate()
            proc.wait(10)


async def frameworks(n: int) -> list[Row]:
    """The same tiny JSON POST endpoint as a bare ASGI app and on litestar, on uvicorn."""
    import uvicorn
    from litestar import Litestar, post

    reply = json.dumps({"ok": True}).encode()

    async def bare(scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            return
        more = True
        while more:
            more = (await receive()).get("more_body", False)
        await send(
            {
                "type": "http.response.start",
                "status": 200,
                "headers": [
                    (b"content-type", b"application/json"),
                    (b"content-length", str(len(reply)).encode()),
                ],
            }
        )
        await send({"type": "http.response.body", "body": reply})

    @post("/v1/chat/completions", status_code=200)
    async def handler(data: dict[str, Any]) -> dict[str, Any]:
        return {"ok": True}

    apps: list[tuple[str, Any]] = [("bare ASGI", bare), ("litestar", Litestar([handler]))]
    rows = []
    for name, app in apps:
        port = procs.free_port()
        server = uvicorn.Server(
            uvicorn.Config(app, host="127.0.0.1", port=port, log_level="error", lifespan="off")
        )
        task = asyncio.create_task(server.serve())
        while not server.started:  # noqa: ASYNC110  (uvicorn exposes a flag, not an event)
            await asyncio.sleep(0.01)
        async with httpx.AsyncClient(timeout=10) as c:
            url = f"http://127.0.0.1:{port}/v1/chat/completions"
            for _ in range(50):
                await c.post(url, json=body())
            lat = []
            for _ in range(n):
                t0 = time.perf_counter()
                (await c.post(url, json=body())).raise_for_status()
                lat.append(time.perf_counter() - t0)
        server.should_exit = True
        await task
        note = f"n={n}, client and server in one process"
        rows.append(sample_row("framework", f"{name}: JSON POST round trip", lat, note))
    return rows


def table(rows: Sequence[Row]) -> str:
    return report.markdown_table(
        ["section", "measurement", "p50 ms", "p99 ms", "notes"],
        ([r.section, r.what, f"{r.p50_ms:.2f}", f"{r.p99_ms:.2f}", r.note] for r in rows),
        right={2, 3},
    )


async def run(quick: bool, samples: Samples | None = None) -> list[Row]:
    n = 150 if quick else 600
    seconds = 2.0 if quick else 6.0
    rows: list[Row] = []
    progress("[overhead] starting 4 simulated pods and the gateway")
    with processes(pods=4) as (pods, gw, extproc_port, gw_pid):
        async with httpx.AsyncClient(timeout=5) as c:
            for _ in range(200):
                with contextlib.suppress(httpx.HTTPError):
                    r = await c.get(gw + "/ready")
                    if r.status_code == 200 and r.json()["readyPods"] == len(pods):
                        break
                await asyncio.sleep(0.05)
        steps: list[tuple[str, Callable[[], Awaitable[list[Row]]]]] = [
            (f"added latency, {n} sequential requests per path", lambda: added_latency(pods, gw, n, samples)),
            (
                f"max req/s at concurrency 32 for {seconds:.0f} s per path",
                lambda: throughput(pods, gw, gw_pid, concurrency=32, seconds=seconds),
            ),
            (f"burst of {300 if quick else 1000}", lambda: burst(pods, gw, 300 if quick else 1000)),
            (f"ext_proc pick, {n} round trips", lambda: extproc_pick(extproc_port, n)),
            (
                f"via Envoy + picker, {n // 2} per path",
                lambda: via_envoy(pods, extproc_port, n // 2, samples),
            ),
        ]
        for i, (what, step) in enumerate(steps, start=1):
            t = time.perf_counter()
            progress(f"[overhead] {i}/{len(steps) + 1} {what}")
            rows += await step()
            progress(f"[overhead]     done in {time.perf_counter() - t:.1f} s")
    progress(f"[overhead] {len(steps) + 1}/{len(steps) + 1} web frameworks, {n} requests each")
    rows += await frameworks(n)
    return rows


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="fleetgate bench overhead", description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="fewer requests and shorter load (CI smoke)")
    report.add_output_options(ap, "overhead", "the plot goes next to it as <stem>_latency.png")
    args = ap.parse_args(argv)
    out = report.output_path(args.out, "overhead", args.quick)
    samples: Samples = {}
    logging.getLogger("httpx").setLevel(logging.WARNING)  # litestar's log config would print every request
    rows = asyncio.run(run(args.quick, samples))
    text = table(rows)
    print(text)
    report.write_results(out, "overhead", report.module_command("bench.proxy_overhead", argv), text)
    progress(f"[overhead] wrote {out}")
    if not args.no_plots and samples:
        from bench.plots import latency_cdfs

        png = latency_cdfs(
            samples,
            out.parent / f"{out.stem}_latency.png",
            "Request latency: direct to pod vs via gateway vs via Envoy + picker (sequential)",
        )
        progress(f"[overhead] wrote {png}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
