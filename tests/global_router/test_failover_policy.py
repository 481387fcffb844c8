"""Retry budget and consecutive-failure ejection with exponential backoff."""

from __future__ import annotations

from common.config.router import Failover
from global_router.failover import ClusterHealth, RetryBudget


class Clock:
    def __init__(self) -> None:
        self.t = 1000.0

    def __call__(self) -> float:
        return self.t


def test_retry_budget_is_ratio_of_recent_requests_plus_minimum() -> None:
    clock = Clock()
    budget = RetryBudget(0.2, min_retries=2, window_s=10, clock=clock)
    for _ in range(50):
        budget.record_request()
    granted = sum(budget.try_retry() for _ in range(100))
    assert granted == 12  # 0.2 x 50 + 2
    clock.t += 11  # the window slides: old requests and retries no longer count
    assert sum(budget.try_retry() for _ in range(10)) == 2


def test_ejection_after_consecutive_failures_with_doubling_backoff() -> None:
    clock = Clock()
    ejected: list[tuple[str, float]] = []
    health = ClusterHealth(Failover(eject_after_failures=3, eject_base_s=1.0, eject_max_s=4.0), clock=clock)
    health.on_eject = lambda cid, s: ejected.append((cid, s))
    assert not health.record_failure("a")
    assert not health.record_failure("a")
    assert health.record_failure("a")
    assert health.is_ejected("a") and "a" in health.ejected()
    clock.t += 1.01
    assert not health.is_ejected("a")
    for _ in range(3):
        health.record_failure("a")
    clock.t += 1.5
    assert health.is_ejected("a")  # second ejection lasts 2 s
    clock.t += 0.6
    for _ in range(3):
        health.record_failure("a")
    for _ in range(3):
        clock.t += 10
        for _ in range(3):
            health.record_failure("a")
    assert [s for _, s in ejected] == [1.0, 2.0, 4.0, 4.0, 4.0, 4.0]  # capped at ejectMaxS


def test_success_resets_failures_and_backoff() -> None:
    clock = Clock()
    health = ClusterHealth(Failover(eject_after_failures=2, eject_base_s=1.0), clock=clock)
    health.record_failure("a")
    health.record_success("a")
    assert not health.record_failure("a")  # the streak restarted
    health.record_failure("a")
    assert health.is_ejected("a")
    health.record_success("a")
    assert not health.is_ejected("a")
    health.record_failure("a")
    assert health.record_failure("a")
    assert health.ejected()["a"] <= 1.0  # back to the base duration


def test_an_unacknowledged_request_ejects_at_once_and_backs_off_like_any_ejection() -> None:
    clock = Clock()
    health = ClusterHealth(Failover(eject_after_failures=3, eject_base_s=1.0, eject_max_s=4.0), clock=clock)
    assert health.record_failure("a", eject=True)  # the first one: its data path is black-holed
    assert health.is_ejected("a")
    assert not health.record_failure("a", eject=True)  # already out: not extended
    clock.t += 1.01
    assert not health.is_ejected("a")
    assert health.record_failure("a", eject=True)  # still black-holed when tried again: 2 s now
    assert health.snapshot("a")["ejected_for_s"] == 2.0
    health.record_success("a")
    assert not health.is_ejected("a")
