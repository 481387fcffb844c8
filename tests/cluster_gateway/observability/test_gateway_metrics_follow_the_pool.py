"""Per-pod series leave with their pod; `/metrics` renders are cached for a second, off the loop."""

from __future__ import annotations

import asyncio

from prometheus_client.parser import text_string_to_metric_families

from cluster_gateway.observability import OK, UPSTREAM_ERROR, GatewayMetrics
from cluster_gateway.pool import Endpoint, EndpointPool
from common.request_log import RequestRecord


def _pool(names: list[str]) -> EndpointPool:
    pool = EndpointPool()
    pool.set_endpoints(Endpoint(name=n, address="127.0.0.1", port=9000 + i) for i, n in enumerate(names))
    return pool


def _served(metrics: GatewayMetrics, pod: str, outcome: str = OK) -> None:
    rec = RequestRecord("rid", "/v1/chat/completions", started=0.0)
    rec.model, rec.target, rec.outcome, rec.ttft_s = "m", pod, outcome, 0.05
    rec.prompt_tokens, rec.completion_tokens = 12, 30
    metrics.request_done(pod, "default", outcome)
    metrics.ttft.labels(pod).observe(0.05)
    metrics.request_finished(rec, "chat")


def _pods_in(body: bytes) -> dict[str, set[str]]:
    """family name -> the pod label values among its samples."""
    out: dict[str, set[str]] = {}
    for fam in text_string_to_metric_families(body.decode()):
        for s in fam.samples:
            if "pod" in s.labels:
                out.setdefault(fam.name, set()).add(s.labels["pod"])
    return out


def test_a_pod_that_left_has_no_series_after_the_next_render() -> None:
    pool = _pool(["pod-a", "pod-b"])
    metrics = GatewayMetrics()
    metrics.watch_pool(pool, lambda: 0)
    _served(metrics, "pod-a")
    _served(metrics, "pod-b")
    _served(metrics, "pod-b", UPSTREAM_ERROR)
    before = _pods_in(metrics.render()[0])
    for family in (
        "fleetgate_gateway_requests",
        "fleetgate_gateway_ttft_seconds",
        "fleetgate_gateway_tokens",
        "fleetgate_gateway_inflight_requests",
    ):
        assert before[family] >= {"pod-a", "pod-b"}, family

    pool.set_endpoints([Endpoint(name="pod-a", address="127.0.0.1", port=9000)])  # pod-b left discovery
    after = _pods_in(metrics.render()[0])
    assert all("pod-b" not in pods for pods in after.values()), after
    assert after["fleetgate_gateway_tokens"] == {"pod-a"}
    # what stays is unchanged: pod-a's counters and the by-model GenAI series go on
    fams = {f.name: f for f in text_string_to_metric_families(metrics.render()[0].decode())}
    pod_tokens = {s.labels["gen_ai_token_type"]: s.value for s in fams["fleetgate_gateway_tokens"].samples}
    assert pod_tokens == {"input": 12.0, "output": 30.0}
    usage = {
        s.labels["gen_ai_token_type"]: s.value
        for s in fams["gen_ai_client_token_usage"].samples
        if s.name.endswith("_sum")
    }
    assert usage == {"input": 24.0, "output": 60.0}  # both pods' served requests: a model-level series


def test_a_rollout_does_not_grow_the_body() -> None:
    """Four rollouts of 50 renamed pods: the body stays the size of one pool."""
    pool = _pool([f"r0-{i}" for i in range(50)])
    metrics = GatewayMetrics()
    metrics.watch_pool(pool, lambda: 0)
    sizes = []
    for rollout in range(5):
        names = [f"r{rollout}-{i}" for i in range(50)]
        pool.set_endpoints(Endpoint(name=n, address="127.0.0.1", port=9000 + i) for i, n in enumerate(names))
        for n in names:
            _served(metrics, n)
        sizes.append(len(metrics.render()[0]))
    assert max(sizes) - min(sizes) < 0.02 * min(sizes), sizes


async def test_renders_are_reused_for_a_while_and_shared() -> None:
    pool = _pool(["pod-a"])
    metrics = GatewayMetrics()
    metrics.watch_pool(pool, lambda: 0)
    now = [100.0]
    metrics._clock = lambda: now[0]
    took = iter([0.2, 0.2, 0.2, 0.001])  # perf_counter pairs: a render that took 0.2 s... then 1 ms
    ticks = [0.0]

    def perf_counter() -> float:
        ticks[0] += next(took, 0.001) / 2
        return ticks[0]

    metrics._timer = perf_counter
    first, _ = await metrics.render_async()
    _served(metrics, "pod-a")
    now[0] += 0.5
    cached, _ = await metrics.render_async()
    assert cached is first  # a 0.2 s render is reused for up to RENDER_CACHE_S (1 s)
    now[0] += 0.6
    fresh, _ = await metrics.render_async()
    assert fresh != first and b'pod="pod-a"' in fresh
    now[0] += 1.5
    a, b = await asyncio.gather(metrics.render_async(), metrics.render_async())
    assert a[0] is b[0]  # two scrapers at once: one render
    _served(metrics, "pod-a")
    now[0] += 0.03  # that render took 1 ms: reused for 20 ms only
    assert (await metrics.render_async())[0] != a[0]
