"""Requests held in the gateway's own admission queue are ahead of any new request: the report
counts them in `queued`, takes them off headroom and raises the TTFT estimate, and the queue forming,
clearing or changing level is a significant change (pure functions)."""

from __future__ import annotations

import asyncio
from itertools import pairwise

from cluster_gateway.agent.aggregate import (
    build_report,
    fold_gateway_queue,
    gateway_queue_level,
    significant_state,
)
from cluster_gateway.pool import EndpointPool
from cluster_gateway.request_path.admission import AdmissionQueue
from common.config.gateway import Saturation
from common.proto.fleetgate.v1 import capacity_pb2
from tests.cluster_gateway.agent.pools import add_pod, make_spec

SAT = Saturation(queue_depth=5, kv_usage=0.8)


def pool_of(waiting: int, running: int, kv: float, pods: int = 2) -> EndpointPool:
    pool = EndpointPool()
    for i in range(pods):
        add_pod(
            pool, f"p{i}", models={"base", "ad"}, waiting=waiting, running=running, kv=kv, adapters={"ad"}
        )
    return pool


def report(pool: EndpointPool, held: dict[str, int] | None) -> capacity_pb2.ModelCapacity:
    (m,) = build_report(make_spec(), pool, 1, SAT, gateway_queued=held).models
    return m


def test_adapters_fold_under_their_base_and_unknown_names_drop_with_several_bases() -> None:
    bases = {"a": frozenset({"a-lora"}), "b": frozenset({"b-lora", "shared"})}
    folded = fold_gateway_queue({"a": 2, "a-lora": 3, "shared": 1, "nobody": 7, "b": 0}, bases)
    assert folded == {"a": 5, "b": 1}
    assert fold_gateway_queue({"alias": 4}, {"only": frozenset()}) == {"only": 4}


def test_held_requests_add_to_queued_take_headroom_and_raise_the_estimate() -> None:
    pool = pool_of(waiting=1, running=10, kv=0.5)
    free = report(pool, None)
    assert free.headroom_requests > 0
    held = report(pool, {"base": 3, "ad": 1})
    assert held.queued == free.queued + 4
    assert held.headroom_requests == max(0, free.headroom_requests - 4)
    assert held.est_ttft_ms > free.est_ttft_ms


def test_every_held_request_raises_the_estimate_of_a_saturated_cluster() -> None:
    pool = pool_of(waiting=6, running=40, kv=0.85)
    ttft = [report(pool, {"base": n}).est_ttft_ms for n in range(0, 12, 2)]
    assert len(set(ttft)) == len(ttft) and ttft == sorted(ttft), ttft
    assert report(pool, {"base": 50}).headroom_requests == 0


def test_an_empty_gateway_queue_leaves_the_report_unchanged() -> None:
    pool = pool_of(waiting=2, running=10, kv=0.5)
    assert report(pool, {}) == report(pool, None) == report(pool, {"base": 0})


async def test_the_admission_queue_exposes_its_depth_per_requested_model() -> None:
    q: AdmissionQueue[bool] = AdmissionQueue(size=8, timeout_s=5.0)
    saturated = {"value": True}
    waiters = [
        asyncio.create_task(q.admit(m, lambda: saturated["value"], bool, lambda _: False))
        for m in ("base", "ad", "base")
    ]
    await asyncio.sleep(0.01)
    assert q.depth_by_model() == {"base": 2, "ad": 1}
    saturated["value"] = False
    q.notify()
    await asyncio.wait_for(asyncio.gather(*waiters), 2.0)
    assert q.depth_by_model() == {}


def test_gateway_queue_levels_are_coarse_and_grow_by_four() -> None:
    depths = [0, 1, 3, 4, 15, 16, 63, 64, 1000, -1]
    assert [gateway_queue_level(d) for d in depths] == [0, 1, 1, 2, 2, 3, 3, 4, 4, 0]


def test_a_gateway_queue_forming_or_clearing_is_significant_but_jitter_within_a_level_is_not() -> None:
    pool = pool_of(waiting=6, running=40, kv=0.85)

    def state(held: dict[str, int] | None) -> object:
        return significant_state(pool, SAT, 1.0, gateway_queued=held)

    idle = state(None)
    assert state({}) == state({"base": 0}) == idle
    forming = state({"base": 2})
    assert forming != idle
    assert state({"base": 1}) == state({"base": 3}) == forming  # ±1 within 1-3
    assert state({"base": 2, "ad": 1}) != forming  # another name held too
    assert state({"base": 4}) != forming
    assert state({"base": 0}) == idle  # cleared


def test_a_steadily_growing_gateway_queue_changes_the_state_once_per_level() -> None:
    pool = pool_of(waiting=6, running=40, kv=0.85)
    states = [significant_state(pool, SAT, 1.0, gateway_queued={"base": n}) for n in range(200)]
    changes = sum(1 for a, b in pairwise(states) if a != b)
    assert changes == 4  # 0→1, 3→4, 15→16, 63→64
