"""The feed bench's in-process mode drives the real publisher and replica."""

from __future__ import annotations

from bench.feed_idle import in_process


def test_in_process_times_each_step_and_a_quiet_tick_is_the_cheapest_for_the_gateway() -> None:
    got = in_process(pods=200, workers=2)
    assert set(got) == {
        "quiet_tick_ms",
        "every_pod_changed_tick_ms",
        "worker_applies_whole_pool_ms",
        "worker_report_ms",
    }
    assert all(v >= 0 for v in got.values())
    assert got["quiet_tick_ms"] < got["worker_applies_whole_pool_ms"]
