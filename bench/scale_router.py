"""Tier 2 control-plane costs by fleet size: router CPU per capacity report, selection µs per request.

A synthetic fleet of N clusters in 6 regions: every cluster serves the main model (so a request for
it has N candidates, the worst case), every second one a second model, each with LoRA adapters;
costs, spot/on-demand, headroom and TTFT estimates vary. CPU time (`thread_time`) per operation, so
the figures carry over from a loaded machine.

- report: what the capacity server does with one accepted report after gRPC hands it over —
  validate, policy check, translate, publish to the in-process fleet view (its per-model candidate
  index included), build the Directive; and, for several replicas, what a replica spends on a
  Redis notice of another replica's report (decode once per change).
- select: `ClusterSelector.rank` for an interactive request from a client region, as the router's
  request path calls it, with this replica's own dispatches counted against the clusters' headroom.
"""

from __future__ import annotations

import asyncio
import random
import statistics
import time
from collections.abc import Sequence
from dataclasses import dataclass

from common.config.router import AgentAuth, ReportLimits, Selection
from common.proto.fleetgate.v1 import capacity_pb2
from global_router.capacity_server import validate_report
from global_router.dispatch_tracker import DispatchTracker
from global_router.fleet_view import MemoryFleetView, RedisFleetView, state_from_report
from global_router.report_policy import ReportPolicy
from global_router.selection import ClusterSelector, SelectionRequest

REGIONS = ["us-east", "us-west", "eu-west", "eu-central", "ap-south", "ap-east"]
MAIN, SECOND = "llama-3.1-8b", "qwen-2.5-7b"
ADAPTERS = [f"lora-{i}" for i in range(8)]


@dataclass
class RouterRow:
    clusters: int
    report_cpu_us: float  # capacity server, one accepted report (no gRPC transport)
    notice_cpu_us: float  # another replica, one Redis notice of a changed report
    select_p50_us: float
    select_p99_us: float
    candidates: int  # candidates a request for the main model has


def _report(i: int, seq: int, rng: random.Random) -> capacity_pb2.CapacityReport:
    models = [MAIN] if i % 2 else [MAIN, SECOND]
    return capacity_pb2.CapacityReport(
        cluster_id=f"c{i}",
        region=REGIONS[i % len(REGIONS)],
        zone=f"{REGIONS[i % len(REGIONS)]}-a",
        gateway_url=f"https://gw-{i}.example.com",
        sequence=seq,
        cost_per_gpu_hour=rng.choice((1.3, 2.2, 4.0)),
        gpus=rng.randint(8, 64),
        capacity_type=rng.choice((capacity_pb2.CAPACITY_TYPE_SPOT, capacity_pb2.CAPACITY_TYPE_ON_DEMAND)),
        models=[
            capacity_pb2.ModelCapacity(
                model=m,
                ready_pods=rng.randint(2, 40),
                saturated_pods=rng.randint(0, 2),
                queued=rng.randint(0, 20),
                running=rng.randint(0, 400),
                kv_headroom=rng.random(),
                adapters_resident=rng.sample(ADAPTERS, 2),
                adapters_available=ADAPTERS,
                est_ttft_ms=rng.uniform(80, 900),
                tokens_per_second=rng.uniform(500, 5000),
                headroom_requests=rng.randint(0, 60),
                gpu_tokens_per_second=rng.uniform(800, 3000),
            )
            for m in models
        ],
    )


def _policy(n: int) -> ReportPolicy:
    agents = [
        AgentAuth(cluster_id=f"c{i}", token_sha256="0" * 64, gateway_hosts=[f"gw-{i}.example.com"])
        for i in range(n)
    ]
    return ReportPolicy(agents, ReportLimits(), local_ips=frozenset())


def run_one(n: int, requests: int, seed: int = 1, indexed: bool = True) -> RouterRow:
    """`indexed` False: selection as before the candidate index (every cluster scanned and scored)."""
    rng = random.Random(seed)
    fleet = MemoryFleetView(ttl_s=60.0)
    policy = _policy(n)
    reports = [_report(i, 1, rng) for i in range(n)]
    loop = asyncio.new_event_loop()
    try:
        report_us: list[float] = []
        for rep in range(3):
            for i in range(n):
                r = reports[i]
                r.sequence = rep + 1
                c0 = time.thread_time_ns()
                validate_report(r)
                policy.check(r.cluster_id, r)
                loop.run_until_complete(fleet.publish(state_from_report(r, time.time())))
                capacity_pb2.Directive(
                    ack=capacity_pb2.Ack(sequence=r.sequence),
                    report_interval_ms=1000,
                    drain=fleet.router_drained(r.cluster_id),
                )
                report_us.append((time.thread_time_ns() - c0) / 1000)
    finally:
        loop.close()
    notice_us = _notice_cost(reports, rng)
    tracker = DispatchTracker()
    sel = Selection() if indexed else Selection(max_scored=0)
    selector = ClusterSelector(sel, stale_after_s=30.0, tracker=tracker, rng=random.Random(seed))
    sel_us: list[float] = []
    cands = 0
    for k in range(requests):
        req = SelectionRequest(model=MAIN, client_region=REGIONS[k % len(REGIONS)])
        c0 = time.thread_time_ns()
        ranking = selector.rank(
            fleet.snapshot(), req, ejected=(), candidates=fleet.candidates(MAIN) if indexed else None
        )
        sel_us.append((time.thread_time_ns() - c0) / 1000)
        top = ranking.candidates[0]
        tracker.on_dispatch(top.cluster_id, top.cluster.seq)
        cands = max(cands, len(ranking.candidates))  # how many were scored
    sel_us.sort()
    return RouterRow(
        clusters=n,
        report_cpu_us=statistics.median(report_us),
        notice_cpu_us=notice_us,
        select_p50_us=sel_us[len(sel_us) // 2],
        select_p99_us=sel_us[min(len(sel_us) - 1, int(len(sel_us) * 0.99))],
        candidates=cands,
    )


def _notice_cost(reports: Sequence[capacity_pb2.CapacityReport], rng: random.Random) -> float:
    """CPU µs a replica spends applying one Redis notice of a changed report (no Redis I/O)."""
    view = RedisFleetView(None, prefix="bench:", ttl_s=60.0)  # type: ignore[arg-type]
    notices = [view.encode_notice(state_from_report(r, time.time())) for r in reports]
    us: list[float] = []
    for raw in notices:
        c0 = time.thread_time_ns()
        view._apply_notice(raw)
        us.append((time.thread_time_ns() - c0) / 1000)
    return statistics.median(us)


def rows(sizes: Sequence[int], requests: int) -> list[RouterRow]:
    return [run_one(n, requests) for n in sizes]


def table(rs: Sequence[RouterRow]) -> str:
    lines = [
        "| clusters | candidates | router CPU µs / report | replica CPU µs / notice | select p50 µs | select p99 µs |",
        "| ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    lines += [
        f"| {r.clusters} | {r.candidates} | {r.report_cpu_us:.0f} | {r.notice_cpu_us:.0f} "
        f"| {r.select_p50_us:.1f} | {r.select_p99_us:.1f} |"
        for r in rs
    ]
    return "\n".join(lines)


if __name__ == "__main__":
    print(table(rows([3, 30, 300], 2000)))
    print(table([run_one(n, 2000, indexed=False) for n in (3, 30, 300)]))
