"""How long one scheduling decision takes: µs per `Scheduler.schedule()` at 10, 100 and 1000 pods.

Pools over `scheduling.twoStage.minPods` (256) are decided over a sample (`--two-stage 0:2` = off,
every pod scored, the cost before two-stage picks).

The pool carries realistic, changing metrics (queues, batches, KV use, LoRA adapters; a "scrape"
rewrites every pod's metrics every 100 decisions), prompts are a mix of a few shared system prompts
and unique ones, and every decision is dispatched like the proxy does (acquire, on_dispatch, later
release), so the prefix index and in-flight counts are warm and realistic.

    python -m bench.pick_bench [--quick] [--pods 10,100,1000] [--decisions N] [--profiles latency,reference]
"""

from __future__ import annotations

import argparse
import gc
import random
import statistics
import sys
import time
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass

from cluster_gateway.pool import Endpoint, EndpointPool, PodMetrics
from cluster_gateway.scheduling import LLMRequest, Scheduler
from common.config.gateway import Scheduling, TwoStage

MODEL = "llama-3.1-8b"
ADAPTERS = [f"lora-{i}" for i in range(8)]
SCRAPE_EVERY = 100  # decisions between two metric refreshes (~100 ms at 1k req/s)


@dataclass
class Row:
    pods: int
    profile: str
    decisions: int
    p50_us: float
    p99_us: float
    mean_us: float
    cpu_p50_us: float
    cpu_p99_us: float


def _pct(sorted_us: list[float], q: float) -> float:
    return sorted_us[min(len(sorted_us) - 1, int(len(sorted_us) * q))]


def _pool(n: int, rng: random.Random) -> EndpointPool:
    pool = EndpointPool()
    pool.set_endpoints(
        Endpoint(name=f"pod-{i}", address=f"10.{i // 65536}.{(i // 256) % 256}.{i % 256}", port=8000)
        for i in range(n)
    )
    for p in pool.pods():
        pool.set_catalog(p.name, [MODEL], dict.fromkeys(ADAPTERS, MODEL))  # as vLLM lists them
    _scrape(pool, rng)
    return pool


def _scrape(pool: EndpointPool, rng: random.Random) -> None:
    now = time.monotonic()
    for p in pool.pods():
        running = rng.randint(0, 64)
        pool.record_scrape(
            p.name,
            PodMetrics(
                engine="vllm",
                waiting=rng.choice((0, 0, 0, 0, 1, 2, 3, 6)),
                running=running,
                kv_usage=min(0.99, running / 80 + rng.random() * 0.1),
                running_adapters=frozenset(rng.sample(ADAPTERS, rng.randint(0, 3))),
                waiting_adapters=frozenset(rng.sample(ADAPTERS, rng.randint(0, 1))),
                max_lora=4,
                block_size=16,
                num_gpu_blocks=8192,
                scraped_at=now,
            ),
        )


def _prompts(rng: random.Random, count: int) -> list[tuple[str, str]]:
    """(model, prompt): 60% share one of 8 system prompts (~2 KB), the rest are unique; 20% use an adapter."""
    systems = [f"<|system|>You are assistant #{k}. " + "Follow the policy carefully. " * 70 for k in range(8)]
    out = []
    for i in range(count):
        user = f"<|user|>question {i}: " + "lorem ipsum dolor sit amet " * rng.randint(2, 40)
        prompt = rng.choice(systems) + user if rng.random() < 0.6 else user
        model = rng.choice(ADAPTERS) if rng.random() < 0.2 else MODEL
        out.append((model, prompt))
    return out


def run_one(
    n_pods: int, profile: str, decisions: int, seed: int = 1, scheduling: Scheduling | None = None
) -> Row:
    """`scheduling`: the config to pick with (default: the defaults with `profile`)."""
    rng = random.Random(seed)
    pool = _pool(n_pods, rng)
    cfg = scheduling or Scheduling(default_profile=profile)
    sched = Scheduler(pool, cfg, rng=random.Random(seed), staleness_s=60.0)
    reqs = [
        LLMRequest(model=m, prompt_text=t, max_tokens=256, stream=True, profile=None)
        for m, t in _prompts(rng, decisions)
    ]
    inflight: deque[str] = deque()
    samples: list[int] = []
    cpu: list[int] = []
    gc_was = gc.isenabled()
    gc.disable()
    try:
        for i, r in enumerate(reqs):
            if i % SCRAPE_EVERY == 0:
                _scrape(pool, rng)
            c0 = time.thread_time_ns()
            t0 = time.perf_counter_ns()
            res = sched.schedule(r)
            samples.append(time.perf_counter_ns() - t0)
            cpu.append(time.thread_time_ns() - c0)
            pod = res.pods[0]
            pool.acquire(pod.name)
            sched.on_dispatch(r, pod)
            inflight.append(pod.name)
            if len(inflight) > 4 * n_pods:
                pool.release(inflight.popleft())
    finally:
        if gc_was:
            gc.enable()
    warm = len(samples) // 20  # the first 5% warm caches and the prefix index
    us = sorted(s / 1000 for s in samples[warm:])
    cpu_us = sorted(c / 1000 for c in cpu[warm:])
    return Row(
        pods=n_pods,
        profile=profile,
        decisions=len(us),
        p50_us=_pct(us, 0.5),
        p99_us=_pct(us, 0.99),
        mean_us=statistics.fmean(us),
        cpu_p50_us=_pct(cpu_us, 0.5),
        cpu_p99_us=_pct(cpu_us, 0.99),
    )


def table(rows: Sequence[Row]) -> str:
    lines = [
        "| pods | profile | decisions | p50 µs | p99 µs | mean µs | CPU p50 µs | CPU p99 µs |",
        "| ---: | --- | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    lines += [
        f"| {r.pods} | {r.profile} | {r.decisions} | {r.p50_us:.1f} | {r.p99_us:.1f} | {r.mean_us:.1f} "
        f"| {r.cpu_p50_us:.1f} | {r.cpu_p99_us:.1f} |"
        for r in rows
    ]
    return "\n".join(lines)


def parse_two_stage(spec: str | None) -> TwoStage:
    """`MIN_PODS:SAMPLE` (the `--two-stage` option of pick and pick-sim) as config; None: the defaults."""
    if not spec:
        return TwoStage()
    min_pods, _, sample = spec.partition(":")
    return TwoStage(min_pods=int(min_pods), sample=int(sample or TwoStage().sample))


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="fleetgate bench pick", description=__doc__.splitlines()[0])
    ap.add_argument("--pods", default="10,100,1000", help="comma-separated pool sizes")
    ap.add_argument("--decisions", type=int, default=3000, help="schedule() calls per pool size")
    ap.add_argument("--profiles", default="latency,reference", help="comma-separated profile names")
    ap.add_argument("--quick", action="store_true", help="fewer decisions (CI smoke run)")
    ap.add_argument("--seed", type=int, default=1, help="seed of the generated pools (default 1)")
    ap.add_argument(
        "--two-stage", default=None, metavar="MIN_PODS:SAMPLE", help="scheduling.twoStage (0:2 = off)"
    )
    args = ap.parse_args(argv)
    decisions = 300 if args.quick else args.decisions
    two = parse_two_stage(args.two_stage)
    rows = [
        run_one(int(n), profile, decisions, args.seed, Scheduling(default_profile=profile, two_stage=two))
        for n in args.pods.split(",")
        for profile in args.profiles.split(",")
    ]
    print(table(rows))
    print(
        "\nWall time includes preemption by other processes on a shared machine; CPU time "
        "(thread_time) is the decision's own cost."
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
