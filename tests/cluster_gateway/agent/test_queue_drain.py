"""The prompts queued ahead of a new request hold it up by at most one prefill each, and at most by
the pod's measured gap between admissions: prefill measured under load already includes the steps
a prompt shares with the others prefilled alongside it, so a whole prefill per prompt ahead would
count that sharing twice."""

from __future__ import annotations

import pytest

from cluster_gateway.agent.service_model import DEFAULT_SERVICE, estimate_ttft_ms, pod_speed
from cluster_gateway.metrics.perf_window import PerfWindow
from cluster_gateway.pool import PodMetrics, PodPerf
from common.config.gateway import Saturation

SAT = Saturation(queue_depth=5, kv_usage=0.8)


def loaded(perf: PodPerf, waiting: int = 3) -> PodMetrics:
    """A TGI-like pod (no KV gauge) whose 8 slots run: its queue is what a new request waits behind."""
    return PodMetrics(engine="tgi", waiting=waiting, running=8, perf=perf)


def test_the_admission_gap_measured_under_load_bounds_each_prompt_ahead() -> None:
    shared = PodPerf(prefill_s=0.7, service_s=0.7, running_cap=8, admit_gap_s=0.3)
    speed = pod_speed(loaded(shared), SAT, DEFAULT_SERVICE)
    assert speed.drain_s == pytest.approx(0.3)
    rate = 8 / 0.7  # slots free up faster than prompts drain: the compute path decides
    for ahead in (1, 3, 6):
        ttft_s = estimate_ttft_ms(speed, ahead, 8, 0) / 1000
        assert ttft_s == pytest.approx(0.7 + max((ahead + 1) / rate, ahead * 0.3))
        assert ttft_s < 0.7 * (ahead + 1)  # below the double-counting (ahead + 1) x prefill


def test_a_sparse_admission_gap_never_charges_more_than_a_serial_prefill() -> None:
    light = PodPerf(prefill_s=0.2, service_s=0.5, running_cap=8, admit_gap_s=4.0)  # few requests
    unknown = PodPerf(prefill_s=0.2, service_s=0.5, running_cap=8)  # none admitted in the window
    for perf in (light, unknown):
        assert pod_speed(loaded(perf), SAT, DEFAULT_SERVICE).drain_s == pytest.approx(0.2)


def test_the_admission_gap_is_the_window_over_requests_that_left_the_queue() -> None:
    w = PerfWindow(window_s=30.0)
    m = PodMetrics(engine="vllm", waiting=2, running=4, kv_usage=0.3)
    assert w.update("p", 0.0, {"queue": (1.0, 100.0)}, m).admit_gap_s is None  # one reading: no window
    perf = w.update("p", 10.0, {"queue": (3.0, 140.0)}, m)
    assert perf.admit_gap_s == pytest.approx(10.0 / 40)
    assert w.update("p", 20.0, {"queue": (3.0, 140.0)}, m).admit_gap_s == pytest.approx(20.0 / 40)
    assert PerfWindow().update("q", 0.0, {"ttft": (1.0, 5.0)}, m).admit_gap_s is None  # no queue figure
