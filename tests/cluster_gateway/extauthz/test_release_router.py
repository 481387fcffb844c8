"""A release reaches the process holding the pick: here at once, elsewhere through the feed."""

from __future__ import annotations

from cluster_gateway.extauthz.release import ReleaseRouter
from cluster_gateway.pool import EndpointPool
from cluster_gateway.workers.feed import Snapshot, WorkerReport
from cluster_gateway.workers.publisher import PoolPublisher
from tests.cluster_gateway.workers.fakes import Writer


def pick_id(worker: int, seq: int) -> str:
    return f"{worker}.{seq}.{'ab' * 8}"  # the ledger's form: worker, sequence number, nonce


def test_own_picks_are_released_here_and_others_wait_in_the_outbox() -> None:
    done: list[tuple[str, int]] = []
    router = ReleaseRouter(2, lambda pid, status: done.append((pid, status)) or True)
    router.route(pick_id(2, 7), 200)
    router.route(pick_id(0, 1), 503)
    router.route(pick_id(5, 3), 0)
    router.route("forged", 200)
    router.route("2.7", 200)  # no nonce: never issued by a ledger
    assert done == [(pick_id(2, 7), 200)]
    assert router.drain() == [(pick_id(0, 1), 503), (pick_id(5, 3), 0)] and router.drain() == []


def test_the_gateway_process_hands_each_release_to_its_owner() -> None:
    import msgspec

    from cluster_gateway.workers import publisher as pub

    mine: list[tuple[str, int]] = []
    own_seen = [("1.4", 200)]  # the gateway process's access log saw worker 1's pick end
    p = PoolPublisher(EndpointPool(), "/unused")
    p.release_local = lambda pid, status: mine.append((pid, status))
    p.own_outbox = lambda: [own_seen.pop()] if own_seen else []
    w1, w2 = pub._Worker(Writer()), pub._Worker(Writer())  # type: ignore[arg-type]
    p._workers.extend([w1, w2])
    p._merge(w1, WorkerReport(worker=1))
    # worker 2's access log saw: a pick of the gateway process, one of worker 1, one of nobody
    p._merge(w2, WorkerReport(worker=2, releases=[("0.9", 200), ("1.5", 500), ("7.1", 200)]))
    assert mine == [("0.9", 200)]
    p.publish()
    decode = msgspec.msgpack.Decoder(Snapshot)
    snap1 = decode.decode(w1.writer.frames[-1][4:])  # type: ignore[attr-defined]
    snap2 = decode.decode(w2.writer.frames[-1][4:])  # type: ignore[attr-defined]
    assert snap1.releases == [("1.5", 500), ("1.4", 200)] and snap2.releases == []
    sent = len(w1.writer.frames)  # type: ignore[attr-defined]
    p.publish()  # nothing new: each release went out once, and a quiet tick sends nothing
    assert len(w1.writer.frames) == sent  # type: ignore[attr-defined]
