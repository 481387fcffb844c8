"""Selection at 300 clusters: per-model candidate lists kept by the fleet view as reports arrive, a
short list scored when many clusters serve the model, and Redis notices decoded once per change."""

from __future__ import annotations

import asyncio
import random
from dataclasses import replace

from common.config.router import Selection, SelectionWeights, TrafficClassPolicy
from global_router import fleet_view
from global_router.dispatch_tracker import DispatchTracker
from global_router.fleet_view import ClusterState, MemoryFleetView, RedisFleetView
from global_router.selection import ClusterSelector, SelectionRequest
from tests.global_router.fleet_fixtures import MODEL, cluster

REGIONS = ["us", "eu", "ap"]


def _fleet(states: list[ClusterState]) -> MemoryFleetView:
    view = MemoryFleetView(ttl_s=600.0)
    loop = asyncio.new_event_loop()
    try:
        for s in states:
            loop.run_until_complete(view.publish(s))
    finally:
        loop.close()
    return view


def _selector(tracker: DispatchTracker | None = None, **sel: object) -> ClusterSelector:
    return ClusterSelector(
        Selection(**sel),  # type: ignore[arg-type]
        stale_after_s=30.0,
        tracker=tracker or DispatchTracker(),
        rng=random.Random(3),
    )


def _many(n: int = 300) -> list[ClusterState]:
    rng = random.Random(5)
    return [
        cluster(
            f"c{i}",
            region=REGIONS[i % 3],
            headroom=rng.randint(0, 30),
            ttft_ms=rng.uniform(200, 700),
            cost=rng.choice((2.0, 3.0, 4.0)),
        )
        for i in range(n)
    ]


def test_the_index_follows_reports_models_adapters_and_expiry() -> None:
    a = cluster("a", adapters=frozenset({"lora-x"}))
    b = cluster("b", model="other-model")
    view = _fleet([a, b])
    assert set((view.candidates(MODEL) or {}).entries) == {"a"}  # type: ignore[union-attr]
    assert set((view.candidates("lora-x") or {}).entries) == {"a"}  # type: ignore[union-attr]
    assert view.candidates("missing") is None
    # a's next report no longer lists the adapter, and b now serves MODEL too
    asyncio.run(view.publish(replace(cluster("a"), seq=2)))
    asyncio.run(view.publish(replace(cluster("b"), seq=2)))
    assert view.candidates("lora-x") is None
    assert set(view.candidates(MODEL).entries) == {"a", "b"}  # type: ignore[union-attr]
    assert view.candidates("other-model") is None
    view._cache.prune(a.received_at + 10_000)  # both silent past the TTL
    assert view.candidates(MODEL) is None


def test_small_fleets_rank_the_same_with_and_without_the_index() -> None:
    states = _many(8)  # at most selection.maxScored (10): every cluster scored either way
    view = _fleet(states)
    req = SelectionRequest(model=MODEL, client_region="eu")
    plain = _selector().rank(view.snapshot(), req)
    indexed = _selector().rank(view.snapshot(), req, candidates=view.candidates(MODEL))
    assert [c.cluster_id for c in indexed.candidates] == [c.cluster_id for c in plain.candidates]


def test_a_widely_served_model_scores_a_short_list_that_holds_the_best_cluster() -> None:
    states = _many()
    states[137] = cluster("best", region="eu", headroom=500, ttft_ms=150, cost=2.0)  # 137 % 3: "ap"
    view = _fleet(states)
    sel = _selector()
    req = SelectionRequest(model=MODEL, client_region="eu")
    ranking = sel.rank(view.snapshot(), req, candidates=view.candidates(MODEL))
    assert len(ranking.candidates) <= Selection().max_scored
    full = _selector(max_scored=0).rank(view.snapshot(), req, candidates=view.candidates(MODEL))
    assert len(full.candidates) == 300
    assert ranking.candidates[0].cluster_id == full.candidates[0].cluster_id == "best"


def test_a_burst_moves_on_once_the_best_clusters_room_is_used_up() -> None:
    states = _many()
    states[10] = cluster("roomy", headroom=40, ttft_ms=150)
    view = _fleet(states)
    tracker = DispatchTracker()
    sel = _selector(tracker)
    req = SelectionRequest(model=MODEL)
    chosen = []
    for _ in range(60):
        top = sel.rank(view.snapshot(), req, candidates=view.candidates(MODEL)).candidates[0]
        tracker.on_dispatch(top.cluster_id, top.cluster.seq)
        chosen.append(top.cluster_id)
    assert chosen.count("roomy") >= 30  # it takes the burst while it has room...
    assert chosen[-1] != "roomy"  # ...then the live walk finds the next ones, before any report


def test_batch_traffic_still_finds_the_cheapest_cluster_with_room() -> None:
    states = _many()
    states[222] = cluster("cheap", headroom=5, cost=0.5, ttft_ms=650)
    view = _fleet(states)
    batch = TrafficClassPolicy(
        weights=SelectionWeights(headroom=1.0, queue=0.5, ttft=0.0, region=0.0, cost=4.0)
    )
    sel = _selector(classes={"batch": batch})
    req = SelectionRequest(model=MODEL, traffic_class="batch")
    assert (
        sel.rank(view.snapshot(), req, candidates=view.candidates(MODEL)).candidates[0].cluster_id == "cheap"
    )


def test_a_notice_is_decoded_once_per_change(monkeypatch: object) -> None:
    view = RedisFleetView(None, prefix="t:", ttl_s=60.0)  # type: ignore[arg-type]
    decoded: list[bytes] = []
    real = fleet_view._decode_state

    def counting(raw: bytes) -> ClusterState:
        decoded.append(raw)
        return real(raw)

    monkeypatch.setattr(fleet_view, "_decode_state", counting)  # type: ignore[attr-defined]
    a1 = cluster("a", seq=1)
    view._apply_notice(view.encode_notice(a1))
    view._apply_notice(view.encode_notice(a1))  # the same state again (an echo, a rescan)
    assert len(decoded) == 1 and view.get("a") is not None
    view._apply_notice(view.encode_notice(replace(a1, seq=2, received_at=a1.received_at + 1)))
    assert len(decoded) == 2 and view.get("a").seq == 2  # type: ignore[union-attr]
    assert set(view.candidates(MODEL).entries) == {"a"}  # type: ignore[union-attr]
