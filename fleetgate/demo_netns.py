"""`fleetgate demo --netns`: the demo's three regions as network namespaces, 20-150 ms apart over
emulated WAN links, so a user sees real-looking latencies and can cut a region off while it runs.

The fleet is the netns test bed's (`fleetgate/netbed/`): one namespace per cluster (simulated pods +
gateway + agent), two router replicas sharing Redis, every hop through a WAN relay. The global
endpoint is published on the host's loopback by one relay link into the bed's ingress balancer.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import shlex
import shutil
import signal
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, TextIO

import httpx

from common.wanrelay import Link
from fleetgate.netbed import netns
from fleetgate.netbed.bed import MODEL, ClusterPlan, Testbed, Topology
from fleetgate.netbed.scenarios import REGION_MS  # the regions the scenarios and kind use

PREFERRED_PORT = 8000


def topology(time_scale: float) -> Topology:
    return Topology(
        (
            ClusterPlan("us-east-1", "us-east", pods=3, cost_per_gpu_hour=4.0),
            ClusterPlan("eu-west-1", "eu-west", pods=3, cost_per_gpu_hour=1.3),
            ClusterPlan("ap-south-1", "ap-south", pods=2, cost_per_gpu_hour=0.8),
        ),
        REGION_MS,
        time_scale=time_scale,
    )


def unsupported(args: argparse.Namespace) -> str | None:
    """Demo options the namespace fleet does not offer (it brings its own Redis and plain pods)."""
    if args.load:
        return "--load is not available with --netns (its traffic mix needs LoRA pods)"
    if args.redis:
        return "--redis is not available with --netns (the bed runs its own Redis in a namespace)"
    return None


def header(endpoint: str, bed: Testbed) -> list[str]:
    lines = [
        f"global endpoint: {endpoint}",
        f"api key: {bed.api_key}",
        f"batch api key: {bed.batch_key}",
    ]
    for i, c in enumerate(bed.topo.clusters):
        lines.append(
            f"cluster {c.cluster_id}: region {c.region}, {bed.topo.region_ms[c.region]:.0f} ms one way "
            f"from the routers (namespace {bed.nets.name(f'c{i}')})"
        )
    body = json.dumps({"model": MODEL, "messages": [{"role": "user", "content": "hello"}], "max_tokens": 16})
    lines += [
        "# try (pick the client's region with x-fleetgate-client-region); each line pastes as printed:",
        f"curl -si {endpoint}/v1/chat/completions -H 'authorization: Bearer {bed.api_key}' \\",
        f"  -H 'content-type: application/json' -H 'x-fleetgate-client-region: eu-west' -d '{body}'; echo",
        f"# cut a region's agent off the routers (JSON lines on the relay's control socket {bed.sockdir}/relay.sock):",
        f"{shlex.quote(sys.executable)} -c \"from common.wanrelay import ControlClient as C; C('{bed.sockdir}/relay.sock')"
        ".call('set', name='agent:eu-west-1', partition='full')\"",
    ]
    return lines


def summary(doc: dict[str, Any], started: float) -> str:
    parts = [
        f"{c['id']} {'fresh' if c['fresh'] else 'STALE'} {c['requests_total']} req"
        for c in sorted(doc["clusters"], key=lambda c: c["id"])
    ]
    return f"[{time.monotonic() - started:5.0f} s] " + " | ".join(parts)


async def _open_endpoint(bed: Testbed, port: int | None) -> Link:
    """127.0.0.1:PORT on the host -> the bed's ingress balancer (a Unix socket into the namespaces)."""
    for p in [port] if port is not None else [PREFERRED_PORT, 0]:
        door = Link("endpoint", f"127.0.0.1:{p}", [f"unix:{bed.ingress()}"])
        try:
            await door.start()
            return door
        except OSError:
            if port is not None:
                raise
    raise OSError("no free port for the global endpoint")


async def run_netns(args: argparse.Namespace, out: TextIO = sys.stdout) -> int:
    problem = unsupported(args) or netns.unavailable_reason()
    if problem is not None:
        print(f"fleetgate demo --netns: {problem}", file=sys.stderr)
        return 2
    netns.remove_orphans()
    workdir = Path(tempfile.mkdtemp(prefix="fleetgate-demo-netns-"))
    bed = Testbed(topology(args.time_scale), workdir)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    door: Link | None = None
    code = 0
    try:
        try:
            await asyncio.to_thread(bed.start, args.ready_timeout)
            door = await _open_endpoint(bed, args.port)
        except (RuntimeError, TimeoutError, OSError) as exc:
            print(f"fleetgate demo --netns: {exc}", file=sys.stderr)
            return 1
        endpoint = f"http://{door.bound}"
        print("\n".join(header(endpoint, bed)), file=out, flush=True)
        started = time.monotonic()
        every = args.summary_every if args.no_live or not out.isatty() else args.interval
        async with httpx.AsyncClient(base_url=endpoint, timeout=5.0, trust_env=False) as client:
            while not stop.is_set():
                if args.duration is not None and time.monotonic() - started >= args.duration:
                    break
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(stop.wait(), every)
                with contextlib.suppress(httpx.HTTPError, ValueError):
                    fleet = await client.get("/fleet", headers={"authorization": f"Bearer {bed.admin_key}"})
                    doc = fleet.raise_for_status().json()
                    print(summary(doc, started), file=out, flush=True)
    finally:
        if door is not None:
            await door.stop()
        problems = await asyncio.to_thread(bed.close)
        shutil.rmtree(workdir, ignore_errors=True)
        if problems:
            print(f"fleetgate demo --netns: teardown: {problems}", file=sys.stderr)
            code = 1
        print("fleetgate demo --netns: stopped; namespaces removed", file=sys.stderr, flush=True)
    return code
