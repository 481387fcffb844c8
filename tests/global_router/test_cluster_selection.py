"""Cluster ranking: filters, headroom/cost/region/class scoring, burst accounting, shedding."""

from __future__ import annotations

import random
from collections import Counter
from dataclasses import replace

import pytest

from common.config.router import Selection
from common.errors import OpenAIError
from global_router.dispatch_tracker import DispatchTracker
from global_router.selection import ClusterSelector, SelectionRequest
from tests.global_router.fleet_fixtures import MODEL, cluster


def _selector(selection: Selection | None = None, tracker: DispatchTracker | None = None) -> ClusterSelector:
    return ClusterSelector(
        selection or Selection(),
        stale_after_s=3.0,
        tracker=tracker or DispatchTracker(),
        rng=random.Random(1),
    )


def _ids(sel: ClusterSelector, clusters: list, **kw: object) -> list[str]:
    req = SelectionRequest(model=kw.pop("model", MODEL), **kw)  # type: ignore[arg-type]
    return [c.cluster_id for c in sel.rank(clusters, req).candidates]


def test_more_headroom_and_shorter_queue_rank_first() -> None:
    clusters = [cluster("busy", headroom=1, queued=8, ttft_ms=900), cluster("idle", headroom=20)]
    assert _ids(_selector(), clusters)[0] == "idle"


def test_draining_operator_drained_and_forgotten_clusters_are_filtered() -> None:
    clusters = [
        cluster("forgotten", age_s=400),  # past forgetAfterS (300 s)
        cluster("draining", draining=True),
        cluster("drained", router_drain=True),
        cluster("ok", headroom=1),
    ]
    assert _ids(_selector(), clusters) == ["ok"]


def _at(now: float) -> ClusterSelector:
    """A selector whose clock is pinned: ages are exact, whatever the machine's load."""
    return ClusterSelector(
        Selection(), stale_after_s=3.0, forget_after_s=60.0, tracker=DispatchTracker(), clock=lambda: now
    )


def test_a_stale_cluster_stays_routable_on_aged_headroom() -> None:
    now = 1_000_000.0
    stale = replace(cluster("stale", headroom=100), received_at=now - 30.0)  # 10x staleAfterS
    fresh = replace(cluster("fresh", headroom=1, queued=5), received_at=now - 1.0)
    ranking = _at(now).rank([stale, fresh], SelectionRequest(model=MODEL))
    # aged, not demoted (staleness.py): 10 left of its 100 still beats a fresh cluster with 1
    assert [c.cluster_id for c in ranking.candidates] == ["stale", "fresh"]
    aged = ranking.candidates[0]
    assert aged.stale and aged.headroom == 10  # 100 x 3 s / 30 s
    # every agent silent (a partition, a busy router): the last-known-good view keeps serving
    only_stale = _at(now).rank([stale], SelectionRequest(model=MODEL))
    assert [c.cluster_id for c in only_stale.candidates] == ["stale"]
    # beyond forgetAfterS the report no longer counts
    with pytest.raises(OpenAIError) as ei:
        _at(now + 31.0).rank([stale], SelectionRequest(model=MODEL))
    assert ei.value.status == 503 and ei.value.headers["retry-after"] == "1"


def test_start_up_without_reports_is_a_retryable_503_not_a_404() -> None:
    now = [1_000_000.0]
    sel = ClusterSelector(Selection(), stale_after_s=3.0, tracker=DispatchTracker(), clock=lambda: now[0])
    sel.start_warmup(3.0)
    for fleet in ([], [replace(cluster("a", model="other"), received_at=now[0])]):
        with pytest.raises(OpenAIError) as ei:
            sel.rank(fleet, SelectionRequest(model=MODEL))
        assert ei.value.status == 503 and ei.value.code == "fleet_warming_up"
        assert ei.value.headers["retry-after"] == "1"
    now[0] += 3.5  # warm-up over, and a cluster has reported: an unknown model is really unknown
    with pytest.raises(OpenAIError) as ei:
        sel.rank([replace(cluster("a", model="other"), received_at=now[0])], SelectionRequest(model=MODEL))
    assert ei.value.status == 404 and ei.value.code == "model_not_found"
    with pytest.raises(OpenAIError) as ei:  # an empty fleet stays a 503 even after the warm-up
        sel.rank([], SelectionRequest(model=MODEL))
    assert ei.value.status == 503


def test_routable_counts_known_serving_clusters() -> None:
    now = 1_000_000.0
    clusters = [
        replace(cluster("fresh"), received_at=now),
        replace(cluster("stale"), received_at=now - 30.0),
        replace(cluster("forgotten"), received_at=now - 61.0),
        replace(cluster("empty", ready_pods=0), received_at=now),
        replace(cluster("draining", draining=True), received_at=now),
    ]
    assert _at(now).routable(clusters) == 2


def test_adapter_requests_go_to_clusters_holding_the_adapter() -> None:
    clusters = [cluster("plain", headroom=50), cluster("lora", headroom=2, adapters=frozenset({"sql-lora"}))]
    assert _ids(_selector(), clusters, model="sql-lora") == ["lora"]


def test_client_region_prefers_near_cluster() -> None:
    clusters = [cluster("us1", region="us"), cluster("eu1", region="eu")]
    sel = _selector()
    assert _ids(sel, clusters, client_region="eu")[0] == "eu1"
    assert _ids(sel, clusters, client_region="us")[0] == "us1"


def test_region_latency_matrix_is_used() -> None:
    selection = Selection(region_latency_ms={"ap": {"us": 60.0, "eu": 200.0}})
    clusters = [cluster("us1", region="us"), cluster("eu1", region="eu")]
    assert _ids(_selector(selection), clusters, client_region="ap")[0] == "us1"


def test_batch_prefers_cheapest_cluster_with_room() -> None:
    clusters = [
        cluster("premium", cost=4.0, headroom=30, ttft_ms=100),
        cluster("cheap-spot", cost=1.0, capacity_type="spot", headroom=5, ttft_ms=400),
        cluster("cheapest-full", cost=0.5, headroom=0, queued=10),
    ]
    order = _ids(_selector(), clusters, traffic_class="batch")
    assert order[0] == "cheap-spot"
    assert order[-1] == "cheapest-full"  # no room ranks last


def test_spot_risk_inflates_cost() -> None:
    selection = Selection(spot_discount_risk=1.0)  # spot counted at twice its price
    clusters = [cluster("spot", cost=1.5, capacity_type="spot"), cluster("od", cost=2.0)]
    assert _ids(_selector(selection), clusters, traffic_class="batch")[0] == "od"


def test_batch_ranks_by_cost_per_token_not_per_gpu_hour() -> None:
    # $/Mtok: H100 4.00/(3600 x 2000) = 0.56, spot A100 1.30 x 1.1/(3600 x 900) = 0.44,
    # L4 0.80/(3600 x 200) = 1.11: the cheapest GPU-hour is the dearest token.
    clusters = [
        cluster("l4", cost=0.8, gpu_tokens_per_s=200.0),
        cluster("h100", cost=4.0, gpu_tokens_per_s=2000.0),
        cluster("a100-spot", cost=1.3, capacity_type="spot", gpu_tokens_per_s=900.0),
    ]
    ranked = _selector().rank(clusters, SelectionRequest(model=MODEL, traffic_class="batch")).candidates
    assert [c.cluster_id for c in ranked] == ["a100-spot", "h100", "l4"]
    h100 = next(c for c in ranked if c.cluster_id == "h100")
    assert h100.cost == pytest.approx(4.0 / (3600 * 2000.0) * 1e6)


def test_fast_expensive_beats_slow_cheap_for_batch() -> None:
    clusters = [
        cluster("slow-cheap", cost=0.8, gpu_tokens_per_s=100.0),
        cluster("fast", cost=4.0, gpu_tokens_per_s=1000.0),
    ]
    assert _ids(_selector(), clusters, traffic_class="batch")[0] == "fast"


def test_cost_falls_back_to_gpu_hour_for_all_when_a_throughput_is_missing() -> None:
    clusters = [
        cluster("l4-old-agent", cost=0.8, gpu_tokens_per_s=0.0),
        cluster("h100", cost=4.0, gpu_tokens_per_s=2000.0),
    ]
    ranked = _selector().rank(clusters, SelectionRequest(model=MODEL, traffic_class="batch")).candidates
    assert [c.cluster_id for c in ranked] == ["l4-old-agent", "h100"]
    assert sorted(c.cost for c in ranked) == [0.8, 4.0]  # both per GPU-hour: no mixed units


def test_interactive_keeps_ttft_target_even_if_expensive_cluster_is_cheaper_to_miss() -> None:
    clusters = [
        cluster("slow-cheap", cost=0.5, ttft_ms=2000, headroom=50),
        cluster("fast", cost=4.0, ttft_ms=150, headroom=2),
    ]
    ranked = _selector().rank(clusters, SelectionRequest(model=MODEL, traffic_class="interactive"))
    assert [c.cluster_id for c in ranked.candidates] == ["fast", "slow-cheap"]
    assert ranked.candidates[1].over_target


def test_burst_spreads_using_dispatches_since_last_report() -> None:
    tracker = DispatchTracker()
    sel = _selector(tracker=tracker)
    clusters = [cluster("a", headroom=10), cluster("b", headroom=6)]
    picks: Counter[str] = Counter()
    for _ in range(16):
        best = sel.rank(clusters, SelectionRequest(model=MODEL)).candidates[0]
        tracker.on_dispatch(best.cluster_id, best.cluster.seq)
        picks[best.cluster_id] += 1
    assert picks["a"] >= 8 and picks["b"] >= 5  # not all 16 on the cluster that looked best
    # a new report (new seq) resets the local count
    assert tracker.dispatched_since("a", 2) == 0
    assert tracker.dispatched_since("a", 1) == picks["a"]


def test_ejected_clusters_rank_out_but_fail_open_when_alone() -> None:
    sel = _selector()
    clusters = [cluster("a", headroom=50), cluster("b", headroom=1)]
    assert [
        c.cluster_id for c in sel.rank(clusters, SelectionRequest(model=MODEL), ejected={"a"}).candidates
    ] == ["b"]
    only = sel.rank([cluster("a")], SelectionRequest(model=MODEL), ejected={"a"})
    assert [c.cluster_id for c in only.candidates] == ["a"]


def test_sheddable_tenant_refused_when_every_cluster_is_full() -> None:
    sel = _selector()
    clusters = [cluster("a", headroom=0, queued=5), cluster("b", headroom=0, queued=9)]
    with pytest.raises(OpenAIError) as ei:
        sel.rank(clusters, SelectionRequest(model=MODEL, sheddable=True))
    assert ei.value.status == 429 and ei.value.code == "fleet_saturated"
    ranked = sel.rank(clusters, SelectionRequest(model=MODEL, sheddable=False))
    assert ranked.saturated and ranked.candidates[0].cluster_id == "a"


def test_adapter_resident_cluster_beats_one_that_must_load_it() -> None:
    from dataclasses import replace

    a = cluster("loads", adapters=frozenset({"sql-lora"}))
    b = cluster("resident", adapters=frozenset({"sql-lora"}))
    b = replace(
        b, models={k: replace(m, adapters_resident=frozenset({"sql-lora"})) for k, m in b.models.items()}
    )
    ranked = _selector().rank([a, b], SelectionRequest(model="sql-lora"))
    assert [c.cluster_id for c in ranked.candidates] == ["resident", "loads"]
    assert ranked.candidates[1].predicted_ttft_ms - ranked.candidates[0].predicted_ttft_ms == 150.0


def _regional(**sel: object) -> ClusterSelector:
    matrix = {"eu": {"eu": 0.0, "us": 80.0}}
    return _selector(Selection(region_latency_ms=matrix, **sel))  # type: ignore[arg-type]


def test_a_near_cluster_with_enough_room_beats_a_far_one_with_more() -> None:
    # the far cluster has served (its agent measured small requests: 110 slots), the near one is idle
    # on its priors (8): more room than the request needs does not outweigh 80 ms of WAN
    clusters = [
        cluster("far", region="us", headroom=110, ttft_ms=6),
        cluster("near", region="eu", headroom=8, ttft_ms=15),
    ]
    ranked = _regional().rank(clusters, SelectionRequest(model=MODEL, client_region="eu"))
    assert [c.cluster_id for c in ranked.candidates] == ["near", "far"]
    far, near = ranked.candidates[1], ranked.candidates[0]
    assert far.parts["headroom"] == 1.0 and near.parts["headroom"] == pytest.approx(0.9 + 0.1 * 8 / 110)


def test_capacity_decides_when_the_near_cluster_is_short() -> None:
    req = SelectionRequest(model=MODEL, client_region="eu")
    far = cluster("far", region="us", headroom=110, ttft_ms=6)
    full = _regional().rank([far, cluster("near", region="eu", headroom=0, ttft_ms=15)], req)
    assert [c.cluster_id for c in full.candidates] == ["far", "near"]  # no room: the far one serves
    # short of ampleHeadroom (4), the near cluster's headroom score drops in proportion
    short = _regional().rank([far, cluster("near", region="eu", headroom=1, ttft_ms=15)], req)
    near = next(c for c in short.candidates if c.cluster_id == "near")
    assert near.parts["headroom"] == pytest.approx(0.9 / 4 + 0.1 / 110)  # 1 of ampleHeadroom's 4
    # an operator who wants every free slot to count sets ampleHeadroom high (relative headroom)
    roomy = _regional(ample_headroom=1000).rank(
        [far, cluster("near", region="eu", headroom=8, ttft_ms=15)], req
    )
    near = next(c for c in roomy.candidates if c.cluster_id == "near")
    assert near.parts["headroom"] == pytest.approx(8 / 110)


def test_equal_clusters_with_ample_room_share_a_burst() -> None:
    # room past ampleHeadroom still counts a little (HeadroomScorer.SPREAD): each dispatch lowers a
    # cluster's live headroom, so a burst alternates instead of following a hair's TTFT difference
    tracker = DispatchTracker()
    sel = _selector(tracker=tracker)
    clusters = [cluster("a", headroom=5000, ttft_ms=200.0), cluster("b", headroom=5000, ttft_ms=200.1)]
    picks: Counter[str] = Counter()
    for _ in range(100):
        best = sel.rank(clusters, SelectionRequest(model=MODEL)).candidates[0]
        tracker.on_dispatch(best.cluster_id, best.cluster.seq)
        picks[best.cluster_id] += 1
    assert picks["a"] >= 30 and picks["b"] >= 30  # 62 / 38: the 0.1 ms is worth ~25 dispatches
