"""The adaptive Redis timeout, the circuit breaker and the settlement queue, on injected clocks."""

from __future__ import annotations

from common.config.router import Tenant
from global_router.redis_guard import CircuitBreaker, LatencyTracker
from global_router.settlements import Settlements


def test_timeout_follows_measured_latency_within_floor_and_ceiling() -> None:
    lat = LatencyTracker(floor_s=0.25, ceiling_s=2.0)
    assert lat.timeout() == 0.25
    for _ in range(50):
        lat.observe(0.001)
    assert lat.timeout() == 0.25  # fast Redis: the floor
    for _ in range(50):
        lat.observe(0.3)  # Redis got slow (e.g. 300 ms injected)
    assert abs(lat.timeout() - 0.9) < 1e-9  # 3 x p99
    for _ in range(300):
        lat.observe(5.0)
    assert lat.timeout() == 2.0  # never past the ceiling


def test_breaker_opens_after_consecutive_failures_and_probes_half_open() -> None:
    now = [0.0]
    b = CircuitBreaker(failures=2, open_s=0.5, max_open_s=2.0, clock=lambda: now[0])
    assert b.route() == "redis"
    assert not b.failure("redis")
    assert b.success("redis") is False  # a success resets the count
    assert not b.failure("redis")
    assert b.failure("redis") and b.state == "open" and b.epoch == 1
    assert b.route() == "fallback"
    now[0] = 0.5
    assert b.route() == "probe"  # one probe at a time...
    assert b.route() == "fallback"  # ...the others stay on the fallback
    assert b.failure("probe") and b.state == "open"  # failed probe: open for twice as long
    now[0] = 1.4
    assert b.route() == "fallback"
    now[0] = 1.5
    assert b.route() == "probe"
    assert b.success("probe") and b.state == "closed" and b.route() == "redis"
    assert b.epoch == 1 and b.opened_total == 1  # one outage, however many probes


def test_settlements_merge_per_tenant_and_keep_only_safe_parts_on_failure() -> None:
    now = [10.0]
    s = Settlements(clock=lambda: now[0])
    t = Tenant(name="t", api_key_sha256=[])
    s.add(t, tokens=-40, lease="l1")
    s.add(t, requests=2, tokens=100)
    owed = s.take("t")
    assert owed is not None and (owed.requests, owed.tokens, owed.leases) == (2, 60, ["l1"])
    assert owed.args() == [2, 60, "l1"]
    s.restore(owed)  # charges and releases come back
    again = s.take("t")
    assert again is not None and (again.requests, again.tokens, again.leases) == (2, 60, ["l1"])
    s.restore(type(again)(t, requests=0, tokens=-500, leases=[]))  # a refund is dropped
    assert s.take("t") is None
    s.add(t, tokens=5)
    assert s.due(max_age_s=0.05) == []  # too young for the background flush
    now[0] += 0.06
    assert [o.tokens for o in s.due(max_age_s=0.05)] == [5]
