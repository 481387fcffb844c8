"""Frozen-metrics bookkeeping on its own: only identical bodies under traffic count."""

from __future__ import annotations

from cluster_gateway.metrics.frozen import FrozenBodies


def test_identical_bodies_under_traffic_freeze_after_the_streak() -> None:
    f = FrozenBodies(after_scrapes=3)
    assert not f.observe("a", b"x 1", dispatched=1)  # first sight
    assert not f.observe("a", b"x 1", dispatched=2)
    assert not f.observe("a", b"x 1", dispatched=1)
    assert f.observe("a", b"x 1", dispatched=1)
    assert f.streak("a") == 3
    assert not f.observe("a", b"x 2", dispatched=1)  # it moved: fresh again, streak over
    assert f.streak("a") == 0


def test_an_idle_pod_neither_counts_nor_resets() -> None:
    f = FrozenBodies(after_scrapes=2)
    f.observe("a", b"same", dispatched=0)
    for _ in range(50):
        assert not f.observe("a", b"same", dispatched=0)
    assert not f.observe("a", b"same", dispatched=1)
    assert f.observe("a", b"same", dispatched=1)


def test_pods_are_independent_and_forgotten_and_zero_turns_it_off() -> None:
    f = FrozenBodies(after_scrapes=1)
    f.observe("a", b"b", dispatched=1)
    f.observe("b", b"b", dispatched=1)
    assert f.observe("a", b"b", dispatched=1)
    f.forget("a")
    assert not f.observe("a", b"b", dispatched=1)
    off = FrozenBodies(after_scrapes=0)
    for _ in range(5):
        assert not off.observe("a", b"b", dispatched=1)
