"""The shared scenarios (`scenarios.py`) on the kind fleet of `deploy/kind/up.sh`, for a laptop.

kind gives real Kubernetes (Deployments, rolling updates, kube-proxy, the charts as shipped) but no
way to cut one link between two clusters or to delay one region, so only the scenarios whose needs
are in `KIND_CAPABILITIES` run; the others are listed as skipped with what they need. Each runner
drives the same load (`load.run_load`, `load.one`) and applies the same checks as its netns test;
only the fault is injected the Kubernetes way (`kubectl rollout restart`, a SIGKILL inside the node
container). `deploy/kind/scenarios.sh` runs it after `up.sh`:

    python -m fleetgate.netbed.kind --state deploy/kind/.state [--only NAME] [--list]
"""

from __future__ import annotations

import argparse
import asyncio
import functools
import subprocess
import sys
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx

from fleetgate.netbed.load import Request, failures, one, run_load, wait_for
from fleetgate.netbed.scenarios import KIND_CAPABILITIES, KIND_TOPOLOGY, Scenario, by_name, plan
from fleetgate.netbed.topology import MODEL

NAMESPACE = "fleetgate"
GATEWAY_DEPLOY = "deploy/fleetgate-gateway-fleetgate-cluster-gateway"  # release + chart (deploy/kind/up.sh)
ROUTER_DEPLOY = "deploy/fleetgate-router-fleetgate-global-router"


def kind_cluster(cluster_id: str) -> str:
    """The kind cluster (and the Fleetgate cluster id) of a topology cluster: `fleetgate-<id>`."""
    return f"fleetgate-{cluster_id}"


@dataclass
class KindFleet:
    """The fleet up.sh built: the global endpoint on the host, keys in the state directory."""

    state: Path
    endpoint: str
    router_cluster: str = KIND_TOPOLOGY.clusters[0].cluster_id  # up.sh: ROUTER_REGION, the first one

    def key(self, name: str) -> str:
        return (self.state / name).read_text().strip()

    def auth(self, region: str | None = None) -> dict[str, str]:
        h = {"authorization": f"Bearer {self.key('api-key')}"}
        if region is not None:
            h["x-fleetgate-client-region"] = region
        return h

    def client(self, *, keepalive: bool = True, timeout_s: float = 30.0) -> httpx.AsyncClient:
        limits = httpx.Limits(max_connections=200, max_keepalive_connections=20 if keepalive else 0)
        return httpx.AsyncClient(base_url=self.endpoint, timeout=timeout_s, limits=limits)

    def in_rotation(self) -> set[str]:
        """Topology cluster ids the router sees fresh, not draining, with a ready pod serving MODEL."""
        try:
            r = httpx.get(
                f"{self.endpoint}/fleet",
                headers={"authorization": f"Bearer {self.key('admin-key')}"},
                timeout=5,
            )
            doc: dict[str, Any] = r.raise_for_status().json()
        except (httpx.HTTPError, ValueError):
            return set()
        ids = {kind_cluster(c.cluster_id): c.cluster_id for c in KIND_TOPOLOGY.clusters}
        return {
            ids[c["id"]]
            for c in doc["clusters"]
            if c["id"] in ids
            and c["fresh"]
            and not c["draining"]
            and c["models"].get(MODEL, {}).get("ready_pods", 0) > 0
        }

    def kubectl(self, cluster_id: str, *args: str, timeout_s: float = 240.0) -> str:
        cmd = ["kubectl", "--context", f"kind-{kind_cluster(cluster_id)}", "-n", NAMESPACE, *args]
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout_s)
        if done.returncode != 0:
            raise RuntimeError(f"{' '.join(cmd)} failed: {done.stderr.strip()}")
        return done.stdout

    def rollout_restart(self, cluster_id: str, deployment: str) -> None:
        self.kubectl(cluster_id, "rollout", "restart", deployment)
        self.kubectl(cluster_id, "rollout", "status", deployment, "--timeout", "180s")

    def kill_gateway(self, cluster_id: str) -> None:
        """SIGKILL the gateway's processes inside the kind node (no drain: a lost cluster), then keep
        it down (0 replicas) until `revive_gateway`."""
        node = f"{kind_cluster(cluster_id)}-control-plane"
        subprocess.run(["docker", "exec", node, "pkill", "-KILL", "-f", "fleetgate gateway"], timeout=30)
        self.kubectl(cluster_id, "scale", GATEWAY_DEPLOY, "--replicas", "0")

    def revive_gateway(self, cluster_id: str) -> None:
        self.kubectl(cluster_id, "scale", GATEWAY_DEPLOY, "--replicas", "1")
        self.kubectl(cluster_id, "rollout", "status", GATEWAY_DEPLOY, "--timeout", "180s")


def _back(fleet: KindFleet, cluster_id: str) -> bool:
    return cluster_id in fleet.in_rotation()


async def rolling_restart(fleet: KindFleet) -> list[str]:
    """As `test_rolling_restart.py`: every gateway, then the router, restarted under streaming and
    non-streaming load (Deployment rolling updates: the new pod is up before the old one drains)."""
    regions = [c.region for c in KIND_TOPOLOGY.clusters]
    everyone = {c.cluster_id for c in KIND_TOPOLOGY.clusters}
    stop = asyncio.Event()
    async with fleet.client(keepalive=False) as client:
        load = asyncio.create_task(
            run_load(
                client,
                lambda i: fleet.auth(regions[i % len(regions)]),
                workers=4,
                until=stop,
                max_requests=5000,
                stream_every=3,
            )
        )
        try:
            for c in KIND_TOPOLOGY.clusters:
                await asyncio.to_thread(fleet.rollout_restart, c.cluster_id, GATEWAY_DEPLOY)
                await wait_for(functools.partial(_back, fleet, c.cluster_id), 120, f"{c.cluster_id} back")
            await asyncio.to_thread(fleet.rollout_restart, fleet.router_cluster, ROUTER_DEPLOY)
            await wait_for(lambda: fleet.in_rotation() == everyone, 120, "the router sees the fleet")
        finally:
            stop.set()
            reqs = await load
    problems = [f"{len(failures(reqs))} of {len(reqs)} lost: {failures(reqs)[:8]}"] if failures(reqs) else []
    if len(reqs) <= 50:
        problems.append(f"only {len(reqs)} requests")
    return problems


async def cluster_lost_mid_stream(fleet: KindFleet, streams: int = 4) -> list[str]:
    """As `test_cluster_lost_mid_stream.py`: the first region's gateway SIGKILLed under running
    streams; each cut stream ends within 5 s in an SSE error event, new requests go elsewhere."""
    home = KIND_TOPOLOGY.clusters[0]
    headers = fleet.auth(home.region)
    problems: list[str] = []
    async with fleet.client(timeout_s=20) as client:
        warm = [await one(client, headers) for _ in range(3)]
        problems += [f"warm-up: {f}" for f in failures(warm)]
        running = [
            asyncio.create_task(one(client, headers, stream=True, max_tokens=400)) for _ in range(streams)
        ]
        await asyncio.sleep(0.5)  # the fault's moment, not a synchronisation: the streams run for seconds
        if any(s.done() for s in running):
            problems.append("streams finished before the cluster was lost")
        try:
            await asyncio.to_thread(fleet.kill_gateway, home.cluster_id)
            lost_at = time.monotonic()
            results: list[Request] = await asyncio.wait_for(asyncio.gather(*running), 10)
            after = [await one(client, headers) for _ in range(10)]
        finally:
            await asyncio.to_thread(fleet.revive_gateway, home.cluster_id)
    broke = [r for r in results if r.cluster == kind_cluster(home.cluster_id)]
    if not broke:
        problems.append(f"no stream ran on {home.cluster_id}: {[r.cluster for r in results]}")
    problems += [f"a cut stream did not end in an SSE error event: {r}" for r in broke if not r.stream_error]
    problems += ["a cut stream hung" for r in broke if r.finished - lost_at >= 5]
    problems += [f"after the loss: {f}" for f in failures(after)]
    if kind_cluster(home.cluster_id) in {r.cluster for r in after}:
        problems.append("requests after the loss still went to the lost cluster")
    return problems


RUNNERS: dict[str, Callable[[KindFleet], Awaitable[list[str]]]] = {
    "rolling-restart": rolling_restart,
    "cluster-lost-mid-stream": cluster_lost_mid_stream,
}


def kind_plan() -> list[tuple[Scenario, str]]:
    """The shared plan for kind's capabilities, with each runnable scenario's runner checked."""
    out = plan(KIND_CAPABILITIES)
    for s, why in out:
        if not why and s.name not in RUNNERS:
            raise RuntimeError(f"scenario {s.name} fits kind but has no kind runner")
    return out


async def run(fleet: KindFleet, only: list[str]) -> int:
    failed = 0
    for s, why in kind_plan():
        if only and s.name not in only:
            continue
        if why:
            print(f"SKIP {s.name}: {why} (netns only: tests/multicluster/{s.netns_test})")
            continue
        started = time.monotonic()
        problems = await RUNNERS[s.name](fleet)
        took = time.monotonic() - started
        print(f"{'FAIL' if problems else 'PASS'} {s.name} ({took:.0f} s): {s.proves}")
        for p in problems:
            print(f"    {p}")
        failed += bool(problems)
    return 1 if failed else 0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m fleetgate.netbed.kind", description=__doc__.split("\n")[0])
    ap.add_argument("--state", type=Path, default=Path("deploy/kind/.state"), help="up.sh's state directory")
    ap.add_argument("--endpoint", default="http://127.0.0.1:18000", help="the global endpoint up.sh printed")
    ap.add_argument(
        "--router-cluster", default=KIND_TOPOLOGY.clusters[0].cluster_id, help="up.sh's ROUTER_CLUSTER"
    )
    ap.add_argument("--only", action="append", default=[], help="run only this scenario (repeatable)")
    ap.add_argument("--list", action="store_true", help="print the plan and exit")
    args = ap.parse_args(argv)
    try:
        for name in args.only:
            by_name(name)
    except KeyError as exc:
        print(f"fleetgate.netbed.kind: {exc.args[0]}", file=sys.stderr)
        return 2
    if args.list:
        for s, why in kind_plan():
            print(f"{s.name}\t{'run' if not why else 'skip: ' + why}")
        return 0
    if not (args.state / "api-key").is_file():
        print(f"no {args.state / 'api-key'}: run deploy/kind/up.sh first", file=sys.stderr)
        return 2
    fleet = KindFleet(args.state, args.endpoint.rstrip("/"), args.router_cluster)
    return asyncio.run(run(fleet, args.only))


if __name__ == "__main__":
    sys.exit(main())
