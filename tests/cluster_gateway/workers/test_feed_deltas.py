"""What a tick of the pool feed costs: only the pods that changed, encoded once for every worker,
nothing at all when nothing changed; and a worker's view of the others' in-flight requests stays
exact when the gateway's total does not move but its own share does."""

from __future__ import annotations

from typing import cast

import msgspec

from cluster_gateway.pool import Endpoint, EndpointPool, PodMetrics
from cluster_gateway.workers import publisher as pub
from cluster_gateway.workers.feed import PodView, Snapshot, WorkerReport
from cluster_gateway.workers.replica import PoolReplica
from tests.cluster_gateway.workers.fakes import Writer

_decode = msgspec.msgpack.Decoder(Snapshot).decode


def snapshots(w: pub._Worker) -> list[Snapshot]:
    return [_decode(f[4:]) for f in cast(Writer, w.writer).frames]


def gateway(n: int = 3) -> tuple[EndpointPool, pub.PoolPublisher, list[pub._Worker]]:
    pool = EndpointPool()
    pool.set_endpoints([Endpoint(f"p{i}", "127.0.0.1", 9000 + i) for i in range(n)])
    p = pub.PoolPublisher(pool, "/unused")
    workers = [pub._Worker(Writer()) for _ in range(2)]  # type: ignore[arg-type]
    p._workers.extend(workers)
    for i, w in enumerate(workers, start=1):
        p._merge(w, WorkerReport(worker=i, seq=1))
    return pool, p, workers


def test_a_new_worker_gets_the_whole_pool_then_only_what_changed_and_a_quiet_tick_sends_nothing() -> None:
    pool, p, (w1, w2) = gateway()
    p.publish()
    first = snapshots(w1)[-1]
    assert first.full and [v.name for v in first.pods] == ["p0", "p1", "p2"]
    assert first.acked == {1: 1, 2: 1}
    p.publish()
    assert len(snapshots(w1)) == 1 and len(snapshots(w2)) == 1  # nothing changed: nothing sent
    pool.record_scrape("p1", PodMetrics(engine="vllm", waiting=4, scraped_at=2.0))
    p.publish()
    delta = snapshots(w1)[-1]
    assert not delta.full and [v.name for v in delta.pods] == ["p1"]
    assert delta.pods[0].metrics is not None and delta.pods[0].metrics.waiting == 4
    pool.upsert(Endpoint("p3", "127.0.0.1", 9003))  # membership changed: the whole pool again
    p.publish()
    assert snapshots(w2)[-1].full and len(snapshots(w2)[-1].pods) == 4


def test_a_worker_that_joins_late_gets_the_whole_pool_while_the_others_get_what_changed() -> None:
    pool, p, (w1, _w2) = gateway()
    p.publish()
    pool.acquire("p2")
    late = pub._Worker(Writer())  # type: ignore[arg-type]
    p._workers.append(late)
    p.publish()
    joined = snapshots(late)
    assert len(joined) == 1 and joined[0].full
    assert {v.name: v.inflight for v in joined[0].pods} == {"p0": 0, "p1": 0, "p2": 1}
    assert [v.name for v in snapshots(w1)[-1].pods] == ["p2"] and not snapshots(w1)[-1].full
    p.publish()
    assert len(snapshots(late)) == 1  # and from then on only what changes


def test_workers_without_anything_of_their_own_share_one_encoded_frame() -> None:
    pool, p, (w1, w2) = gateway()
    p.publish()
    pool.acquire("p0")
    p.publish()
    f1, f2 = cast(Writer, w1.writer).frames[-1], cast(Writer, w2.writer).frames[-1]
    assert f1 is f2  # the same bytes object: encoded once
    assert _decode(f1[4:]).pods[0].inflight == 1  # the total; each worker subtracts its own


def test_a_report_counted_without_moving_the_total_still_moves_the_others_share() -> None:
    pool = EndpointPool()
    pool.set_endpoints([Endpoint("a", "127.0.0.1", 9001)])
    replica = PoolReplica(pool, "/unused", 1, dict)

    def view(total: int) -> PodView:
        return PodView("a", "127.0.0.1", 9001, stale=False, inflight=total)

    pool.acquire("a")
    pool.acquire("a")
    r1 = replica.report()
    assert r1 is not None and (r1.seq, r1.inflight) == (1, {"a": 2})
    replica.apply(Snapshot(1, [view(5)], full=True, acked={1: 1}))  # 2 of the 5 are this worker's
    a = pool.get("a")
    assert a is not None and (a.local_inflight, a.inflight) == (2, 5)
    pool.release("a")
    r2 = replica.report()
    assert r2 is not None and (r2.seq, r2.inflight) == (2, {"a": 1})
    # the gateway counted it while another process took one more: the total stays 5, the pod is
    # not in the snapshot, only the acknowledgement moved
    replica.apply(Snapshot(1, [], acked={1: 2}))
    assert (a.local_inflight, a.inflight) == (1, 5)
    assert replica.report() is None  # nothing new to say: no report


def test_a_worker_that_never_reported_counts_the_whole_total_as_others() -> None:
    pool = EndpointPool()
    replica = PoolReplica(pool, "/unused", 3, dict)
    replica.apply(Snapshot(1, [PodView("a", "127.0.0.1", 9001, inflight=4)], full=True, acked={1: 7}))
    a = pool.get("a")
    assert a is not None and a.inflight == 4
