"""The agent's TTFT and headroom estimates follow each pod's speed and concurrent capacity.

Pod speeds are derived from the simulator's hardware profiles (the roofline model the simulated
pods run), not written down: an H100 pod and an L4 pod in the same queue state must be told apart.
"""

from __future__ import annotations

import time
from dataclasses import replace

import pytest

from cluster_gateway.agent.aggregate import build_report
from cluster_gateway.agent.service_model import ServiceModel
from cluster_gateway.pool import EndpointPool, PodMetrics, PodPerf
from common.config.gateway import CapacityInfo, PodPerformance, Saturation
from common.proto.fleetgate.v1 import capacity_pb2
from modelsim.profiles import HardwareProfile, get_profile, with_overrides
from tests.cluster_gateway.agent.pools import add_pod, make_spec

SAT = Saturation(queue_depth=5, kv_usage=0.8)
PROMPT, OUTPUT = 500, 100  # tokens per request in these scenarios
# The L4 pods run with `--max-num-seqs 64` (vLLM's default is 256), so their running cap binds here.
H100, L4 = get_profile("h100-llama3-8b"), with_overrides(get_profile("l4-llama3-8b"), max_num_seqs=64)


def measured(p: HardwareProfile, batch: int = 16) -> PodPerf:
    """What a pod of profile `p` measures on itself serving PROMPT/OUTPUT-token requests at `batch`."""
    prefill = p.expected_ttft_s(PROMPT)
    itl = p.expected_itl_s(batch, PROMPT + OUTPUT // 2)
    return PodPerf(
        prefill_s=prefill,
        service_s=prefill + OUTPUT * itl,
        itl_s=itl,
        footprint_tokens=PROMPT + OUTPUT,
        running_cap=p.max_num_seqs,
    )


def pod_pool(
    p: HardwareProfile | None,
    *,
    waiting: int = 0,
    running: int = 0,
    kv: float = 0.0,
    pods: int = 2,
    perf: PodPerf | None = None,
) -> EndpointPool:
    """`pods` vLLM pods of profile `p` (its KV geometry), all in the same queue state."""
    pool = EndpointPool()
    for i in range(pods):
        add_pod(pool, f"p{i}", models={"m"}, scraped=False)
        pool.record_scrape(
            f"p{i}",
            PodMetrics(
                engine="vllm",
                waiting=waiting,
                running=running,
                kv_usage=kv,
                block_size=p.block_size if p else None,
                num_gpu_blocks=p.num_gpu_blocks if p else None,
                scraped_at=time.monotonic(),
                perf=perf if perf is not None else (measured(p) if p else None),
            ),
        )
    return pool


def model(pool: EndpointPool, capacity: CapacityInfo | None = None) -> capacity_pb2.ModelCapacity:
    (m,) = build_report(make_spec(capacity=capacity), pool, 1, SAT).models
    return m


@pytest.mark.parametrize(
    ("waiting", "running", "kv"),
    [(0, 0, 0.0), (0, 8, 0.2), (2, 40, 0.75), (4, 60, 0.7)],
    ids=["idle", "light", "queued", "deep-queue"],
)
def test_slower_pods_report_a_larger_ttft_for_the_same_queue_state(
    waiting: int, running: int, kv: float
) -> None:
    fast = model(pod_pool(H100, waiting=waiting, running=running, kv=kv))
    slow = model(pod_pool(L4, waiting=waiting, running=running, kv=kv))
    assert slow.est_ttft_ms > fast.est_ttft_ms
    assert fast.est_ttft_ms >= H100.expected_ttft_s(PROMPT) * 1000.0 - 1e-6  # never below a prefill
    assert slow.tokens_per_second <= fast.tokens_per_second
    if running:
        assert slow.tokens_per_second < fast.tokens_per_second


def test_the_queueing_part_follows_the_pods_service_and_prefill_times() -> None:
    ahead = 3
    fast = model(pod_pool(H100, waiting=ahead, running=40, kv=0.75))
    slow = model(pod_pool(L4, waiting=ahead, running=40, kv=0.75))
    c = 40 / 0.75  # the same C for both: KV-bound, below either cap
    for report, p in ((fast, measured(H100)), (slow, measured(L4))):
        assert p.prefill_s is not None and p.service_s is not None and p.itl_s is not None
        queueing_s = report.est_ttft_ms / 1000 - p.prefill_s
        # The longest of the step in progress, waiting for one of C slots (for the requests beyond
        # the C - 40 free ones) and for the prompts ahead to be prefilled.
        need_slot = max(0.0, ahead + 1 - (c - 40))
        assert queueing_s == pytest.approx(
            max(0.5 * p.itl_s, need_slot * p.service_s / c, ahead * p.prefill_s)
        )
    assert slow.est_ttft_ms - fast.est_ttft_ms > 0


@pytest.mark.parametrize("profile", [H100, L4], ids=["h100", "l4"])
def test_queue_growth_raises_the_estimate(profile: HardwareProfile) -> None:
    ttft = [model(pod_pool(profile, waiting=w, running=48, kv=0.75)).est_ttft_ms for w in range(5)]
    assert ttft == sorted(ttft)
    assert len(set(ttft)) == len(ttft), f"each queued request must add time: {ttft}"


def test_idle_headroom_follows_each_pods_kv_pool_and_running_cap() -> None:
    fast = model(pod_pool(H100))
    slow = model(pod_pool(L4))
    # H100: 414k KV tokens / 600 per request > max_num_seqs 256, so the cap binds (x0.8 KV threshold
    # does not, as 690 x 0.8 > 256); L4: 34k tokens / 600 = 57 requests, 45 below the KV threshold.
    per_pod_fast = min(H100.max_num_seqs, int(H100.num_gpu_blocks * 16 / 600 * 0.8)) + 4
    per_pod_slow = min(L4.max_num_seqs, int(L4.num_gpu_blocks * 16 / 600 * 0.8)) + 4
    assert fast.headroom_requests == 2 * per_pod_fast
    assert slow.headroom_requests == 2 * per_pod_slow
    assert slow.headroom_requests < fast.headroom_requests


def test_a_learned_running_cap_bounds_headroom() -> None:
    # Short requests (150 tokens): 64 running fill 30% of the KV pool, which could hold ~213 of
    # them, but the L4 engine runs at most 64.
    short = replace(measured(L4), footprint_tokens=150.0)
    capped = model(pod_pool(L4, waiting=3, running=64, kv=0.3, pods=1, perf=short))
    uncapped = model(
        pod_pool(L4, waiting=3, running=64, kv=0.3, pods=1, perf=replace(short, running_cap=None))
    )
    assert capped.headroom_requests == 5 - 1 - 3  # only queue room is left
    assert uncapped.headroom_requests > 100  # what the KV gauge alone would suggest


def test_before_any_traffic_the_spec_hint_stands_in_and_measurements_win() -> None:
    blank = PodPerf()  # no request served yet: no histogram figures, no learned cap
    no_hint = model(pod_pool(None, waiting=2, running=8, kv=0.5, perf=blank))
    default_prefill_ms = ServiceModel().prefill_ms
    assert no_hint.est_ttft_ms > default_prefill_ms  # a queue: prefill + queueing, from the defaults

    def hint(p: HardwareProfile) -> CapacityInfo:
        return CapacityInfo(
            pod_performance=PodPerformance(
                prefill_ms=p.expected_ttft_s(PROMPT) * 1000,
                decode_tokens_per_second=1.0 / p.expected_itl_s(16, PROMPT),
                max_running_requests=p.max_num_seqs,
            )
        )

    idle_fast = model(pod_pool(None, perf=blank), hint(H100))
    idle_slow = model(pod_pool(None, perf=blank), hint(L4))
    assert idle_fast.est_ttft_ms == pytest.approx(H100.expected_ttft_s(PROMPT) * 1000)
    assert idle_slow.est_ttft_ms == pytest.approx(L4.expected_ttft_s(PROMPT) * 1000)
    queued_fast = model(pod_pool(None, waiting=3, running=20, kv=0.5, perf=blank), hint(H100))
    queued_slow = model(pod_pool(None, waiting=3, running=20, kv=0.5, perf=blank), hint(L4))
    assert queued_slow.est_ttft_ms > queued_fast.est_ttft_ms
    # The hinted cap bounds headroom: 64 running at 40% KV would leave KV room for 64 more below
    # the threshold, but an L4 engine runs at most 64.
    capped = model(pod_pool(None, waiting=0, running=64, kv=0.4, perf=blank), hint(L4))
    assert capped.headroom_requests == 2 * (5 - 1)

    # Once the pods have measured themselves, their figures replace the hint.
    measured_slow = model(pod_pool(L4), hint(H100))
    assert measured_slow.est_ttft_ms == pytest.approx(L4.expected_ttft_s(PROMPT) * 1000)


def test_engines_without_a_kv_gauge_use_the_hinted_cap() -> None:
    pool = EndpointPool()
    add_pod(pool, "tgi", models={"m"}, running=10, kv=None, engine="tgi")
    capacity = CapacityInfo(pod_performance=PodPerformance(max_running_requests=32))
    assert model(pool, capacity).headroom_requests == (32 - 10) + 4


def test_a_pod_that_has_not_served_yet_borrows_its_peers_figures() -> None:
    pool = pod_pool(L4, pods=1)
    add_pod(pool, "new", models={"m"}, running=0, kv=0.0)  # no histograms yet, default figures
    # Unpooled, the new pod's default 80 ms prefill would be the cluster's best: a slow cluster
    # would look fast as soon as it scaled out.
    assert model(pool).est_ttft_ms == pytest.approx(L4.expected_ttft_s(PROMPT) * 1000)
