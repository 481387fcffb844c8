"""Routing quality in simulated time: TTFT per scheduling profile on the same bursty trace.

A compact vLLM-like pod model (continuous batching, shared prefill budget per step, KV capacity,
prefix cache of chained blocks with LRU, LoRA slots with a load delay) runs in discrete 10 ms
steps; the real `Scheduler` routes every arrival, and a scrape copies each pod's state into the
`EndpointPool` every 100 ms, exactly the information gap the gateway has in production. Because time
is simulated, results do not depend on the machine's load; modelsim-based end-to-end benches
measure the same thing over real HTTP.

    python -m bench.pick_sim [--pods 8] [--seconds 60] [--replicas 1] [--profiles latency,reference,...]
"""

from __future__ import annotations

import argparse
import random
import sys
from collections import OrderedDict, deque
from collections.abc import Sequence
from copy import copy
from dataclasses import dataclass, field

from bench.pick_bench import parse_two_stage
from cluster_gateway.pool import Endpoint, EndpointPool, PodMetrics
from cluster_gateway.scheduling import LLMRequest, Scheduler
from cluster_gateway.scheduling.prefix_index import block_hashes
from common.config.gateway import Scheduling
from common.tokens import count_tokens

STEP_S = 0.010
SCRAPE_EVERY = 10  # steps (100 ms)
PREFILL_TOKENS_PER_STEP = 300  # ~30k prompt tokens/s per pod
MAX_SEQS = 48
KV_TOKENS = 60_000
CACHE_BLOCKS = 1_500  # prefix-cache blocks kept per pod (64 chars = 16 tokens each)
BLOCK_CHARS = 64
MAX_LORA = 2
LORA_LOAD_S = 0.3
MODEL = "base"
ADAPTERS = [f"lora-{i}" for i in range(6)]


@dataclass
class SimReq:
    arrive: float
    model: str
    prompt: str
    out_tokens: int
    hashes: tuple[int, ...] = ()
    prefill_left: int = 0
    decode_left: float = 0.0
    ready_at: float = 0.0  # LoRA load finishes
    first_token: float | None = None
    pod: str = ""


@dataclass
class SimPod:
    name: str
    waiting: deque[SimReq] = field(default_factory=deque)
    running: list[SimReq] = field(default_factory=list)
    cache: OrderedDict[int, None] = field(default_factory=OrderedDict)
    adapters: OrderedDict[str, None] = field(default_factory=OrderedDict)  # resident, LRU order

    def kv_used(self) -> int:
        return sum(count_tokens(r.prompt) + r.out_tokens for r in self.running)

    def _admit(self, now: float) -> None:
        """FCFS within KV and batch limits; a request whose adapter has no free slot is skipped
        (it keeps its place) while later ones go ahead, as vLLM's scheduler does."""
        skipped: list[SimReq] = []
        kv = self.kv_used()
        while self.waiting and len(self.running) < MAX_SEQS:
            r = self.waiting[0]
            need = count_tokens(r.prompt) + r.out_tokens
            if kv + need > KV_TOKENS:
                break
            if r.model != MODEL and r.model not in self.adapters:
                in_use = {x.model for x in self.running}
                idle = [a for a in self.adapters if a not in in_use]
                if len(self.adapters) >= MAX_LORA and not idle:
                    skipped.append(self.waiting.popleft())
                    continue
                if len(self.adapters) >= MAX_LORA:
                    del self.adapters[idle[0]]
                self.adapters[r.model] = None
                r.ready_at = now + LORA_LOAD_S
            elif r.model != MODEL:
                self.adapters.move_to_end(r.model)
            self.waiting.popleft()
            kv += need
            cached = 0
            for h in r.hashes:
                if h not in self.cache:
                    break
                cached += 1
                self.cache.move_to_end(h)
            r.prefill_left = max(1, count_tokens(r.prompt) - cached * BLOCK_CHARS // 4)
            self.running.append(r)
        self.waiting.extendleft(reversed(skipped))

    def step(self, now: float) -> list[SimReq]:
        self._admit(now)
        budget = PREFILL_TOKENS_PER_STEP
        done = []
        decode_rate = 1.0 / (1.0 + len(self.running) / 64)  # bigger batches decode slower
        for r in self.running:
            if r.ready_at > now:
                continue
            if r.prefill_left > 0:
                take = min(budget, r.prefill_left)
                r.prefill_left -= take
                budget -= take
                if r.prefill_left == 0:
                    r.first_token = now + STEP_S
                    for h in r.hashes:
                        self.cache[h] = None
                        self.cache.move_to_end(h)
                    while len(self.cache) > CACHE_BLOCKS:
                        self.cache.popitem(last=False)
            else:
                r.decode_left -= decode_rate
                if r.decode_left <= 0:
                    done.append(r)
        if done:
            ids = {id(r) for r in done}
            self.running = [r for r in self.running if id(r) not in ids]
        return done

    def metrics(self, now: float) -> PodMetrics:
        running_adapters = {r.model for r in self.running if r.model != MODEL}
        return PodMetrics(
            engine="vllm",
            waiting=len(self.waiting),
            running=len(self.running),
            kv_usage=min(1.0, self.kv_used() / KV_TOKENS),
            running_adapters=frozenset(running_adapters),
            waiting_adapters=frozenset(r.model for r in self.waiting if r.model != MODEL),
            max_lora=MAX_LORA,
            block_size=16,
            num_gpu_blocks=KV_TOKENS // 16,
            scraped_at=now,
        )


def trace(seconds: float, rate: float, seed: int, adapter_share: float = 0.2) -> list[SimReq]:
    """Poisson background at `rate` req/s plus, every 2 s, a burst of one second's worth in 50 ms."""
    rng = random.Random(seed)
    # Long shared prefixes (documents, long conversations) with skewed popularity: together they
    # exceed one pod's prefix cache, so where a prompt goes decides whether its prefill is cached.
    docs = [
        f"<|system|>Context document {k}. " + "Relevant facts and prior turns. " * rng.randint(60, 200)
        for k in range(120)
    ]
    popularity = [1.0 / (k + 1) for k in range(len(docs))]
    times: list[float] = []
    t = 0.0
    while t < seconds:
        t += rng.expovariate(rate)
        times.append(t)
    for b in range(int(seconds / 2)):
        times += [b * 2.0 + 0.5 + rng.random() * 0.05 for _ in range(int(rate))]
    out = []
    for i, at in enumerate(sorted(times)):
        user = f"<|user|>ticket {i}: " + "details of the problem " * rng.randint(4, 60)
        prompt = rng.choices(docs, popularity)[0] + user if rng.random() < 0.6 else user * 2
        model = rng.choice(ADAPTERS) if rng.random() < adapter_share else MODEL
        out.append(SimReq(arrive=at, model=model, prompt=prompt, out_tokens=rng.randint(20, 250)))
    return out


@dataclass
class Outcome:
    profile: str
    n: int
    p50: float
    p90: float
    p99: float
    mean: float


def run(
    profile: str,
    n_pods: int,
    seconds: float,
    rate: float,
    seed: int,
    adapter_share: float = 0.2,
    scheduling: Scheduling | None = None,
    replicas: int = 1,
) -> Outcome:
    """`replicas` gateways share the pods: each has its own pool (in-flight counts, prefix index) fed
    by the same scrapes, and requests reach them in turn, as behind a Service."""
    reqs = trace(seconds, rate, seed, adapter_share)
    names = [f"pod-{i}" for i in range(n_pods)]
    pools = [EndpointPool() for _ in range(replicas)]
    for pool in pools:
        pool.set_endpoints(Endpoint(name=n, address=f"10.0.0.{i}", port=8000) for i, n in enumerate(names))
        for name in names:
            pool.set_catalog(name, [MODEL], dict.fromkeys(ADAPTERS, MODEL))  # as vLLM lists them
    pods = {name: SimPod(name) for name in names}
    clock = [0.0]
    cfg = scheduling or Scheduling(default_profile=profile)
    scheds = [
        Scheduler(pool, cfg, rng=random.Random(seed + k), clock=lambda: clock[0])
        for k, pool in enumerate(pools)
    ]
    owner: dict[int, EndpointPool] = {}
    i = 0
    step = 0
    end = seconds + 30.0
    while (i < len(reqs) or any(p.running or p.waiting for p in pods.values())) and clock[0] < end:
        now = clock[0]
        if step % SCRAPE_EVERY == 0:
            for name, sp in pods.items():
                m = sp.metrics(now)
                for pool in pools:
                    pool.record_scrape(name, copy(m))
        while i < len(reqs) and reqs[i].arrive <= now:
            r = reqs[i]
            k = i % replicas
            i += 1
            lr = LLMRequest(
                model=r.model, prompt_text=r.prompt, max_tokens=r.out_tokens, stream=True, profile=None
            )
            res = scheds[k].schedule(lr)
            pod = res.pods[0]
            pools[k].acquire(pod.name)
            scheds[k].on_dispatch(lr, pod)
            owner[id(r)] = pools[k]
            # an adapter's blocks are its own, as vLLM hashes them (the adapter is in the extra keys)
            r.hashes = block_hashes(r.prompt, BLOCK_CHARS, 256, r.model if r.model != MODEL else None)
            r.decode_left = float(r.out_tokens)
            r.pod = pod.name
            pods[pod.name].waiting.append(r)
        for name, sp in pods.items():
            for r in sp.step(now):
                owner.pop(id(r)).release(name)
        step += 1
        clock[0] = step * STEP_S
    ttfts = sorted((r.first_token or end) - r.arrive for r in reqs)
    n = len(ttfts)
    return Outcome(
        profile=profile,
        n=n,
        p50=ttfts[n // 2],
        p90=ttfts[int(n * 0.9)],
        p99=ttfts[min(n - 1, int(n * 0.99))],
        mean=sum(ttfts) / n,
    )


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="fleetgate bench pick-sim", description=__doc__.splitlines()[0])
    ap.add_argument("--pods", type=int, default=8, help="simulated pods (default 8)")
    ap.add_argument("--seconds", type=float, default=60.0, help="simulated seconds of trace (default 60)")
    ap.add_argument(
        "--rate", type=float, default=40.0, help="background requests/s (bursts add as many again every 2 s)"
    )
    ap.add_argument(
        "--profiles",
        default="latency,reference,least-inflight,round-robin",
        help="comma-separated routing profiles to compare",
    )
    ap.add_argument("--adapter-share", type=float, default=0.2, help="share of requests for LoRA adapters")
    ap.add_argument("--replicas", type=int, default=1, help="gateway replicas sharing the pods")
    ap.add_argument("--seed", type=int, default=1, help="seed of the trace (default 1)")
    ap.add_argument(
        "--two-stage",
        default=None,
        metavar="MIN_PODS:SAMPLE",
        help="scheduling.twoStage for every profile (e.g. 16:8 to sample a small pool; 0:2 = off)",
    )
    args = ap.parse_args(argv)
    print("| profile | requests | TTFT p50 ms | p90 ms | p99 ms | mean ms |")
    print("| --- | ---: | ---: | ---: | ---: | ---: |")
    for prof in args.profiles.split(","):
        cfg = Scheduling(default_profile=prof, two_stage=parse_two_stage(args.two_stage))
        o = run(
            prof,
            args.pods,
            args.seconds,
            args.rate,
            args.seed,
            args.adapter_share,
            scheduling=cfg,
            replicas=args.replicas,
        )
        print(
            f"| {o.profile} | {o.n} | {o.p50 * 1000:.0f} | {o.p90 * 1000:.0f} | {o.p99 * 1000:.0f} "
            f"| {o.mean * 1000:.0f} |"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
