"""An idle cluster keeps what it measured: no jump to defaults a minute after traffic stops, then a
slow, documented drift toward the configured fallback (injected clock, no waiting)."""

from __future__ import annotations

import itertools

import pytest

from cluster_gateway.agent.aggregate import build_report
from cluster_gateway.agent.service_model import MEASURED_GRACE_S, aged, measured_weight
from cluster_gateway.metrics.perf_window import PerfWindow
from cluster_gateway.pool import Endpoint, EndpointPool, PodMetrics
from common.config.gateway import CapacityInfo, PodPerformance, Saturation
from tests.cluster_gateway.agent.pools import make_spec

SAT = Saturation(queue_depth=5, kv_usage=0.8)
HALF_LIFE = 1800.0
BLOCKS = 10_000  # x 16 tokens: room for 160 requests of 1,000 tokens, far above the engine's cap of 4


class Pod:
    """One vLLM pod with max_num_seqs 4 (which vLLM does not export), scraped on an injected clock."""

    def __init__(self) -> None:
        self.pool = EndpointPool()
        self.pool.upsert(Endpoint(name="p", address="127.0.0.1", port=9000))
        self.pool.set_models("p", {"m"})
        self.window = PerfWindow()
        self.done = 0.0
        self.itl_total = 0.0
        self.itl_count = 0.0

    def scrape(self, t: float, *, waiting: int, running: int, kv: float, finished: int = 0) -> None:
        self.done += finished
        self.itl_total += finished * 50 * 0.01  # 50 tokens a request at 10 ms a token
        self.itl_count += finished * 50
        counters = {"e2e": (self.done * 0.6, self.done), "itl": (self.itl_total, self.itl_count)}
        m = PodMetrics(
            engine="vllm", waiting=waiting, running=running, kv_usage=kv,
            block_size=16, num_gpu_blocks=BLOCKS, scraped_at=t,
        )  # fmt: skip
        m.perf = self.window.update("p", t, counters, m)
        self.pool.record_scrape("p", m)

    def report(self, t: float, capacity: CapacityInfo | None = None) -> tuple[int, float]:
        spec = make_spec(capacity=capacity or CapacityInfo(measured_half_life_s=HALF_LIFE))
        m = build_report(spec, self.pool, 1, SAT, now=t).models[0]
        return m.headroom_requests, m.gpu_tokens_per_second


def loaded_then_idle(pod: Pod, capacity: CapacityInfo | None = None) -> list[tuple[float, int, float]]:
    """30 s saturated at the cap (4 running, 3 waiting), then 6 h idle, scraped every 10 s."""
    for t in range(0, 30):
        pod.scrape(float(t), waiting=3, running=4, kv=0.05, finished=2)
    out = []
    for t in range(30, 30 + 6 * 3600, 10):
        pod.scrape(float(t), waiting=0, running=0, kv=0.0)
        out.append((float(t), *pod.report(float(t), capacity)))
    return out


def test_idle_capacity_does_not_jump_and_drifts_with_the_documented_half_life() -> None:
    pod = Pod()
    series = loaded_then_idle(pod)
    by_t = {t: (h, g) for t, h, g in series}
    busy_headroom, busy_gpu = by_t[30.0]
    assert busy_headroom == 4 + 4  # 4 free slots (nothing running) + queue room below depth 5
    assert busy_gpu == pytest.approx(4 * 100.0)  # cap 4 x 100 tok/s
    # a minute, and the whole grace, after the last request: exactly what it measured
    assert by_t[90.0] == by_t[30.0]
    assert by_t[140.0] == by_t[30.0]
    # no jump anywhere: every report within 5% (or one request of headroom) of the one before
    for (_, h0, g0), (_, h1, g1) in itertools.pairwise(series):
        assert abs(g1 - g0) <= 0.05 * g0, (g0, g1)
        assert abs(h1 - h0) <= max(1, 0.05 * h0), (h0, h1)
    # one half-life past the grace: each figure at the geometric midpoint of what it measured and
    # its fallback (cap 4 -> vLLM's default 256, decode 100 -> 40 tok/s)
    t_half = 29.0 + MEASURED_GRACE_S + HALF_LIFE
    mid = min(by_t, key=lambda t: abs(t - t_half))
    assert by_t[mid][1] == pytest.approx(aged(4, 256, 0.5) * aged(100, 40, 0.5), rel=0.02)
    # hours later: the fallback, reached smoothly (160 requests of 1,000 tokens fit the KV pool)
    assert series[-1][2] == pytest.approx(160 * 40.0, rel=0.05)


def test_the_configured_pod_performance_is_what_it_ages_toward() -> None:
    pod = Pod()
    hint = CapacityInfo(
        measured_half_life_s=HALF_LIFE,
        pod_performance=PodPerformance(max_running_requests=8, decode_tokens_per_second=50.0),
    )
    series = loaded_then_idle(pod, hint)
    assert series[0][2] == pytest.approx(4 * 100.0)  # measured: cap 4 at 100 tok/s
    assert series[-1][2] == pytest.approx(8 * 50.0, rel=0.05)  # the configured pod


def test_traffic_resets_the_age() -> None:
    pod = Pod()
    loaded_then_idle(pod)
    t = 30.0 + 6 * 3600
    for i in range(40):  # saturated at the cap again
        pod.scrape(t + i, waiting=3, running=4, kv=0.05, finished=2)
    assert pod.report(t + 39)[1] == pytest.approx(4 * 100.0)


def test_weight_and_blend() -> None:
    assert measured_weight(MEASURED_GRACE_S, 600.0) == 1.0
    assert measured_weight(MEASURED_GRACE_S + 600.0, 600.0) == pytest.approx(0.5)
    assert aged(4.0, 256.0, 0.5) == pytest.approx(32.0)
    assert aged(None, 256.0, 1.0) == 256.0 and aged(4.0, 256.0, 1.0) == 4.0
