"""GCRA arithmetic and OpenAI-style reset durations."""

from __future__ import annotations

import math

from global_router.gcra import Gcra, format_duration


def test_burst_of_limit_then_steady_rate() -> None:
    g = Gcra(60)  # one per second
    now = 1_000_000.0
    admitted = 0
    for _ in range(100):
        r = g.peek(1, now)
        if r.allowed:
            g.commit(1, now)
            admitted += 1
    assert admitted == 60
    denied = g.peek(1, now)
    assert not denied.allowed and math.isclose(denied.retry_after_ms, 1000.0)
    assert g.peek(1, now + 1000.0).allowed


def test_remaining_and_reset_after_admission() -> None:
    g = Gcra(100)
    r = g.peek(30, 0.0)
    assert r.allowed and r.remaining == 70
    assert math.isclose(r.reset_ms, 18_000.0)  # 30 units x 600 ms


def test_request_bigger_than_limit_never_fits() -> None:
    g = Gcra(1000)
    r = g.peek(1001, 0.0)
    assert not r.allowed and math.isinf(r.retry_after_ms)


def test_refund_moves_tat_back_but_not_below_now() -> None:
    g = Gcra(600)  # 100 ms per unit
    g.commit(300, 0.0)
    g.adjust(-100, 0.0)
    assert math.isclose(g.tat, 20_000.0)
    g.adjust(-10_000, 0.0)
    assert g.tat == 0.0
    g.adjust(50, 0.0)
    assert math.isclose(g.tat, 5_000.0)


def test_format_duration_like_openai() -> None:
    assert format_duration(0) == "0s"
    assert format_duration(17) == "17ms"
    assert format_duration(1000) == "1s"
    assert format_duration(1500) == "1.5s"
    assert format_duration(360_000) == "6m0s"
    assert format_duration(61_500) == "1m1.5s"
    assert format_duration(3_723_000) == "1h2m3s"
