"""What a gateway's `/metrics` costs at 1,000 pods, before and after per-pod series follow the pool.

    python -m bench.metrics_render [--pods 1000] [--rollouts 4]

"before" renders the registry as main did (no pruning, on the caller's thread) after `rollouts`
rollouts that renamed every pod; "after" prunes departed pods first. Both report the CPU time of a
render (time.process_time, which carries over from a loaded machine), the body size and series
count, and the longest event-loop stall while a scrape is served on the loop vs. in a thread.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import time

from prometheus_client import generate_latest

from cluster_gateway.observability import OK, GatewayMetrics
from cluster_gateway.pool import Endpoint, EndpointPool
from common.request_log import RequestRecord

_OUTCOMES = (OK, "upstream_error", "cancelled")
_PROFILES = ("latency", "throughput")


def _fleet(pods: int, rollouts: int) -> tuple[EndpointPool, GatewayMetrics]:
    pool = EndpointPool()
    metrics = GatewayMetrics()
    metrics.watch_pool(pool, lambda: 0)
    for r in range(rollouts + 1):
        names = [f"vllm-{r}-{i:04d}" for i in range(pods)]
        pool.set_endpoints(Endpoint(name=n, address="10.0.0.1", port=8000 + i) for i, n in enumerate(names))
        for n in names:
            for profile in _PROFILES:
                for outcome in _OUTCOMES:
                    metrics.request_done(n, profile, outcome)
            metrics.ttft.labels(n).observe(0.05)
            rec = RequestRecord("x", "/v1/chat/completions", started=time.monotonic() - 0.5)
            rec.model, rec.target, rec.outcome, rec.ttft_s = "llama", n, OK, 0.05
            rec.prompt_tokens, rec.completion_tokens = 100, 200
            metrics.request_finished(rec, "chat")
    return pool, metrics


def _cpu_ms(fn: object, n: int = 5) -> float:
    t0 = time.process_time()
    for _ in range(n):
        fn()  # type: ignore[operator]
    return (time.process_time() - t0) / n * 1000.0


async def _max_stall_ms(scrape: object, scrapes: int = 5) -> float:
    """The longest gap between 1 ms ticks of a loop task while `scrapes` scrapes are served."""
    worst = 0.0
    stop = False

    async def ticker() -> None:
        nonlocal worst
        last = time.perf_counter()
        while not stop:
            await asyncio.sleep(0.001)
            now = time.perf_counter()
            worst = max(worst, now - last)
            last = now

    task = asyncio.create_task(ticker())
    await asyncio.sleep(0.01)
    for _ in range(scrapes):
        await scrape()  # type: ignore[operator]
        await asyncio.sleep(0.002)
    stop = True
    await task
    return worst * 1000.0


def _lines(body: bytes) -> int:
    return sum(1 for ln in body.splitlines() if ln and not ln.startswith(b"#"))


async def _before(pods: int, rollouts: int) -> tuple[int, float, float, float]:
    """As main did: every pod that ever existed still has its series; rendered on the loop."""
    _, metrics = _fleet(pods, rollouts)
    body = generate_latest(metrics.registry)
    cpu = _cpu_ms(lambda: generate_latest(metrics.registry))

    async def on_loop() -> None:
        generate_latest(metrics.registry)

    return _lines(body), len(body) / 1024, cpu, await _max_stall_ms(on_loop)


async def _after(pods: int, rollouts: int) -> tuple[int, float, float, float]:
    _, metrics = _fleet(pods, rollouts)
    body = metrics.render()[0]
    cpu = _cpu_ms(metrics.render)

    async def threaded() -> None:
        metrics._cached = None  # every scrape renders (reusing a render would hide the cost)
        await metrics.render_async()

    return _lines(body), len(body) / 1024, cpu, await _max_stall_ms(threaded)


async def main() -> None:
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("--pods", type=int, default=1000)
    ap.add_argument("--rollouts", type=int, default=4)
    args = ap.parse_args()
    before = await _before(args.pods, args.rollouts)
    gc.collect()  # the first fleet's objects must not lengthen the second's garbage-collector passes
    after = await _after(args.pods, args.rollouts)
    print(f"pods={args.pods} rollouts={args.rollouts}")
    print("| | series | body KB | render CPU ms | longest loop stall ms |")
    print("|---|---:|---:|---:|---:|")
    for name, (n, kb, cpu, stall) in (("before", before), ("after", after)):
        print(f"| {name} | {n} | {kb:.0f} | {cpu:.0f} | {stall:.0f} |")


if __name__ == "__main__":
    asyncio.run(main())
