"""A stale report is aged, not demoted: its cluster keeps competing on cautious figures, so a
partitioned region's own traffic stays home while a fresh cluster of the same region still wins
ties. Every age here comes from a pinned clock, never the machine's."""

from __future__ import annotations

from dataclasses import replace

import pytest

from common.config.router import Selection
from common.errors import OpenAIError
from global_router.dispatch_tracker import DispatchTracker
from global_router.selection import ClusterSelector, SelectionRequest
from global_router.staleness import StaleAging
from tests.global_router.fleet_fixtures import MODEL, cluster

NOW = 1_000_000.0
STALE_AFTER_S = 3.0


def _selector(tracker: DispatchTracker | None = None, **selection: object) -> ClusterSelector:
    return ClusterSelector(
        Selection(**selection),  # type: ignore[arg-type]
        stale_after_s=STALE_AFTER_S,
        forget_after_s=60.0,
        tracker=tracker or DispatchTracker(),
        clock=lambda: NOW,
    )


def _aged(cid: str, age_s: float, **kw: object) -> object:
    return replace(cluster(cid, **kw), received_at=NOW - age_s)  # type: ignore[arg-type]


def test_trust_and_penalty_grow_with_age_and_stay_bounded() -> None:
    aging = StaleAging(STALE_AFTER_S, penalty_ms=20.0)
    assert aging.trust(1.0) == 1.0 and aging.ttft_penalty_ms(3.0) == 0.0  # fresh: as reported
    assert aging.trust(30.0) == pytest.approx(0.1)
    penalties = [aging.ttft_penalty_ms(a) for a in (4.0, 9.0, 30.0, 299.0)]
    assert penalties == sorted(penalties) and all(0 < p < 20.0 for p in penalties)
    assert aging.ttft_penalty_ms(9.0) == pytest.approx(20.0 * (1 - 3.0 / 9.0))


def test_fresh_headroom_counts_every_dispatch_since_the_report_stale_only_what_is_in_flight() -> None:
    aging = StaleAging(STALE_AFTER_S, penalty_ms=20.0)
    assert aging.headroom(10, 1.0, dispatched_since=25, inflight=2) == -15  # the next report shows them
    # 30 s old: 100 x 3/30 = 10, minus the 2 still running there (23 of the 25 finished long ago)
    assert aging.headroom(100, 30.0, dispatched_since=25, inflight=2) == 8
    # in flight, but sent before the report (which already counted them): only those sent since
    assert aging.headroom(100, 30.0, dispatched_since=1, inflight=6) == 9


def test_a_partitioned_region_keeps_its_own_traffic_on_last_known_data() -> None:
    # us-east's report is 9 s old (its agent is cut off); eu-west's is fresh, 80 ms away from us-east
    sel = _selector(region_latency_ms={"us-east": {"us-east": 0.0, "eu-west": 80.0}})
    home = _aged("use1", 9.0, region="us-east", headroom=30, ttft_ms=15.0)
    away = _aged("euw1", 0.5, region="eu-west", headroom=30, ttft_ms=15.0)
    ranking = sel.rank([home, away], SelectionRequest(model=MODEL, client_region="us-east"))
    first = ranking.candidates[0]
    assert first.cluster_id == "use1" and first.stale
    assert first.headroom == 10 and first.predicted_ttft_ms == pytest.approx(15.0 + 20.0 * (1 - 3.0 / 9.0))


def test_a_fresh_cluster_of_the_same_region_wins_over_an_equal_stale_one() -> None:
    stale = _aged("stale", 9.0, headroom=20)
    fresh = _aged("fresh", 0.5, headroom=20)
    ranking = _selector().rank([stale, fresh], SelectionRequest(model=MODEL))
    assert [c.cluster_id for c in ranking.candidates] == ["fresh", "stale"]


def test_a_silent_clusters_headroom_does_not_sink_with_every_request_that_finished_there() -> None:
    tracker = DispatchTracker()
    sel = _selector(tracker)
    silent = _aged("silent", 30.0, headroom=100, seq=7)
    for _ in range(200):  # served and finished on the last-known report
        tracker.on_dispatch("silent", 7)
        tracker.on_done("silent")
    tracker.on_dispatch("silent", 7)  # one still running
    (c,) = sel.rank([silent], SelectionRequest(model=MODEL)).candidates
    assert c.headroom == 9 and c.has_room  # 100 x 3/30 - 1, not 10 - 201


def test_beyond_forget_after_the_report_no_longer_counts() -> None:
    with pytest.raises(OpenAIError) as ei:
        _selector().rank([_aged("gone", 61.0)], SelectionRequest(model=MODEL))
    assert ei.value.status == 503
