"""gpu_tokens_per_second: per-GPU throughput at full concurrency, what Tier 2 prices tokens by."""

from __future__ import annotations

import time

import pytest

from cluster_gateway.agent.aggregate import build_report
from cluster_gateway.agent.service_model import PodSpeed, ServiceModel, gpu_tokens_per_second
from cluster_gateway.pool import Endpoint, EndpointPool, PodMetrics, PodPerf
from common.config.gateway import CapacityInfo, Saturation
from tests.cluster_gateway.agent.pools import add_pod, make_spec

SAT = Saturation(queue_depth=5, kv_usage=0.8)


def _speed(concurrency: float, decode: float) -> PodSpeed:
    return PodSpeed(
        prefill_s=0.05,
        drain_s=0.05,
        service_s=2.0,
        decode_tokens_per_s=decode,
        concurrency=concurrency,
        slots=concurrency,
    )


def _measured_pod(pool: EndpointPool, name: str, *, itl_s: float, cap: int) -> None:
    """A TGI-like pod (no KV gauge): C = its measured running cap, decode rate = 1 / its ITL."""
    pool.upsert(Endpoint(name=name, address="127.0.0.1", port=9000 + len(pool)))
    pool.set_models(name, {"m"})
    perf = PodPerf(itl_s=itl_s, running_cap=cap)
    pool.record_scrape(name, PodMetrics(engine="tgi", running=1, scraped_at=time.monotonic(), perf=perf))


def test_pure_function_averages_pods_and_divides_by_gpus() -> None:
    speeds = [_speed(8, 100.0), _speed(8, 10.0)]
    assert gpu_tokens_per_second(speeds, 1) == pytest.approx((800 + 80) / 2)
    assert gpu_tokens_per_second(speeds, 4) == pytest.approx((800 + 80) / 8)
    assert gpu_tokens_per_second([], 1) == 0.0  # no ready pod: unknown, never "free"


def test_report_carries_throughput_per_gpu_from_measured_speed() -> None:
    pool = EndpointPool()
    _measured_pod(pool, "fast", itl_s=0.01, cap=8)  # 8 x 100 tok/s
    _measured_pod(pool, "slow", itl_s=0.1, cap=8)  # 8 x 10 tok/s
    spec = make_spec(capacity=CapacityInfo(gpus_per_pod=2))
    m = build_report(spec, pool, 1, SAT).models[0]
    assert m.gpu_tokens_per_second == pytest.approx((800 + 80) / (2 * 2))


def test_a_slower_cluster_reports_less_per_gpu_and_unready_pods_do_not_count() -> None:
    fast, slow = EndpointPool(), EndpointPool()
    _measured_pod(fast, "a", itl_s=0.01, cap=16)
    _measured_pod(slow, "b", itl_s=0.1, cap=16)
    add_pod(slow, "gone", models={"m"}, age_s=60.0)  # stale metrics: not ready
    reports = [build_report(make_spec(), p, 1, SAT).models[0] for p in (fast, slow)]
    assert reports[1].ready_pods == 1
    assert reports[0].gpu_tokens_per_second == pytest.approx(16 * 100.0)
    assert reports[1].gpu_tokens_per_second == pytest.approx(16 * 10.0)


def test_idle_pods_fall_back_to_the_spec_decode_rate() -> None:
    pool = EndpointPool()
    add_pod(pool, "tgi", models={"m"}, kv=None, engine="tgi")
    svc = ServiceModel(decode_tokens_per_s=25.0, default_concurrency=8)
    m = build_report(make_spec(), pool, 1, SAT, service=svc).models[0]
    assert m.gpu_tokens_per_second == pytest.approx(8 * 25.0)
