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


async def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--pods", type=int, default=1000)
    ap.add_argument("--rollouts", type=int, default=4)
    args = ap.parse_args()
    _, before = _fleet(args.pods, args.rollouts)
    body_before = generate_latest(before.registry)
    cpu_before = _cpu_ms(lambda: generate_latest(before.registry))

    async def on_loop() -> None:
        generate_latest(before.registry)

    stall_before = await _max_stall_ms(on_loop)
    _, after = _fleet(args.pods, args.rollouts)
    body_after = after.render()[0]
    cpu_after = _cpu_ms(after.render)

    async def threaded() -> None:
        after._cached = None  # every scrape renders (the 1 s cache would hide the cost)
        await after.render_async()

    stall_after = await _max_stall_ms(threaded)
    lines = lambda b: sum(1 for ln in b.splitlines() if ln and not ln.startswith(b"#"))  # noqa: E731
    print(f"pods={args.pods} rollouts={args.rollouts}")
    print("| | series | body KB | render CPU ms | longest loop stall ms |")
    print("|---|---:|---:|---:|---:|")
    print(
        f"| before | {lines(body_before)} | {len(body_before) / 1024:.0f} | {cpu_before:.0f} | {stall_before:.0f} |"
    )
    print(
        f"| after | {lines(body_after)} | {len(body_after) / 1024:.0f} | {cpu_after:.0f} | {stall_after:.0f} |"
    )


if __name__ == "__main__":
    asyncio.run(main())
