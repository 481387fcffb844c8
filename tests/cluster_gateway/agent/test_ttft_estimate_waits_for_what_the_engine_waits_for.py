"""A new request waits for what the engine actually makes it wait for: the step in progress, the
prompts ahead, and a slot only when the engine has no room left (its cap, or a full KV pool).

Measured on one simulated L4 pod (`fleetgate bench estimate`): charging a slot wait whenever a
request was waiting, or whenever running passed the 80% KV threshold computed from whole prompts
(shared prefix blocks counted per request), over-predicted TTFT by 1.5-2.3x at 1.5-2.5 req/s; leaving
out the step in progress under-predicted the engine's own TTFT by ~25% when no queue formed.
"""

from __future__ import annotations

import pytest

from cluster_gateway.agent.service_model import DEFAULT_SERVICE, estimate_ttft_ms, pod_speed
from cluster_gateway.pool import PodMetrics, PodPerf
from common.config.gateway import Saturation

SAT = Saturation(queue_depth=5, kv_usage=0.8)
L4ISH = PodPerf(prefill_s=0.15, service_s=10.0, itl_s=0.08, footprint_tokens=1100.0, running_cap=64)
POOL_BLOCKS, BLOCK = 2150, 16  # ~34k KV tokens: 31 requests of 1,100 tokens if nothing were shared


def pod(waiting: int, running: int, kv: float) -> PodMetrics:
    return PodMetrics(
        engine="vllm",
        waiting=waiting,
        running=running,
        kv_usage=kv,
        block_size=BLOCK,
        num_gpu_blocks=POOL_BLOCKS,
        perf=L4ISH,
    )


def ttft_ms(m: PodMetrics, dispatched: int = 0) -> float:
    return estimate_ttft_ms(pod_speed(m, SAT, DEFAULT_SERVICE), m.waiting, m.running, dispatched)


def test_an_idle_pod_answers_in_one_prefill() -> None:
    assert ttft_ms(pod(0, 0, 0.0)) == pytest.approx(150.0)


def test_a_busy_pod_with_room_adds_the_rest_of_the_step_in_progress() -> None:
    # Admission happens between steps: on average half a step (ITL 80 ms) before the prefill starts.
    assert ttft_ms(pod(0, 10, 0.15)) == pytest.approx(150.0 + 40.0)


def test_prefix_sharing_pods_above_the_kv_threshold_still_admit_at_once() -> None:
    # 34 running hold 43% of the pool (shared system prompts): whole-prompt footprints say only
    # ~25 fit below the 80% threshold, but the engine has room for ~45 more and admits at once.
    assert ttft_ms(pod(0, 34, 0.43)) == pytest.approx(150.0 + 40.0)
    assert ttft_ms(pod(0, 34, 0.43), dispatched=3) == pytest.approx(150.0 + 40.0)


def test_a_request_waiting_for_the_next_step_adds_its_prompt_not_a_slot() -> None:
    # One arrived mid-step: it is prefilled first (at most one prefill), no slot has to free up.
    assert ttft_ms(pod(1, 20, 0.3)) == pytest.approx(150.0 + 150.0)


def test_a_pod_at_its_cap_makes_new_requests_wait_for_a_slot() -> None:
    full = pod_speed(pod(2, 64, 0.6), SAT, DEFAULT_SERVICE)
    # Slots free at running / S: 64 running (shared prefixes), though whole prompts would fit 31.
    assert full.concurrency < 32
    rate = 64 / 10.0
    expected = 150.0 + 1000.0 * max(3 / rate, 2 * 0.15)
    assert estimate_ttft_ms(full, 2, 64, 0) == pytest.approx(expected)
    assert ttft_ms(pod(2, 64, 0.6)) > ttft_ms(pod(2, 40, 0.4))  # same queue, no room: longer
