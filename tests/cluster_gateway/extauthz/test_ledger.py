"""Open picks: ids name their owner, the access log closes them, the TTL closes the forgotten."""

from __future__ import annotations

from typing import Any, cast

from cluster_gateway.extauthz.ledger import PickLedger, owner
from cluster_gateway.pool import PodState
from cluster_gateway.request_path.dispatch import Pick


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def fake(name: str) -> Any:
    return cast(Any, name)


def test_ids_name_their_owner_and_foreign_ids_have_none() -> None:
    ledger = PickLedger(3, ttl_s=10)
    a, b = ledger.open(fake("p"), fake("pod")), ledger.open(fake("q"), fake("pod"))
    assert a != b and owner(a) == owner(b) == 3
    for forged in (
        "",
        "x",
        "3",
        "3.",
        ".1",
        "a.1",
        "1.b",
        "-1.2",
        "3.1",
        "3.1.",
        "3.1.abc",
        "3.x.0123456789abcdef",
    ):
        assert owner(forged) is None, forged


def test_a_guessed_sequence_number_releases_nothing() -> None:
    """Envoy logs a denied request with the client's own `x-fleetgate-pick`: naming an open pick's
    worker and sequence number must not close it."""
    ledger = PickLedger(0, ttl_s=10)
    real = ledger.open(fake("p"), fake("pod"))
    worker, seq, nonce = real.split(".")
    assert owner(real) == 0 and len(nonce) == 16
    for guess in (f"{worker}.{seq}", f"{worker}.{seq}.{'0' * 16}", f"{worker}.{seq}.{nonce[::-1]}"):
        assert ledger.close(guess) is None
    assert len(ledger) == 1 and ledger.close(real) is not None


def test_close_returns_the_pick_once() -> None:
    ledger = PickLedger(0, ttl_s=10)
    pick, pod = cast(Pick, object()), cast(PodState, object())
    pid = ledger.open(pick, pod)
    entry = ledger.close(pid)
    assert entry is not None and entry.pick is pick and entry.pod is pod
    assert ledger.close(pid) is None and ledger.close("0.999") is None and len(ledger) == 0


def test_expire_closes_only_picks_older_than_the_ttl() -> None:
    clock = Clock()
    ledger = PickLedger(0, ttl_s=10, clock=clock)
    old = ledger.open(fake("old"), fake("pod"))
    clock.now += 6
    young = ledger.open(fake("young"), fake("pod"))
    clock.now += 4  # old is exactly ttl old, young 4 s
    assert [e.pick for e in ledger.expire()] == ["old"]
    assert ledger.close(old) is None  # its late log entry finds nothing to release twice
    assert ledger.expire() == [] and len(ledger) == 1
    clock.now += 6
    assert [e.pick for e in ledger.expire()] == ["young"]
    assert ledger.close(young) is None
