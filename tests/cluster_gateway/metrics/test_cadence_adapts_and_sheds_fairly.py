"""The scrape schedule on an injected clock: fair shedding over budget, idle pods slower, traffic sooner."""

from __future__ import annotations

import itertools
from collections import Counter

from cluster_gateway.metrics.cadence import Cadence


def _run(cadence: Cadence, seconds: float, step: float, cpu_s: float, quiet: bool) -> Counter[str]:
    """Drive the schedule: every due pod is scraped at once, costing `cpu_s` each."""
    scraped: Counter[str] = Counter()
    now = 0.0
    while now < seconds:
        for name in cadence.due(now):
            scraped[name] += 1
            cadence.finished(name, now, cpu_s=cpu_s, quiet=quiet)
        now += step
    return scraped


def test_within_budget_every_pod_is_scraped_every_interval() -> None:
    cadence = Cadence(0.1, idle_interval_s=0.5, idle_after=0, budget_cores=1.0, dispatched=lambda _: 0)
    for i in range(100):
        cadence.add(f"p{i}", 0.0, phase=i * 0.001)
    # 100 pods x 10/s x 100 µs = 0.1 core, well within 1 core
    scraped = _run(cadence, 10.0, 0.002, 100e-6, quiet=False)
    assert all(99 <= n <= 101 for n in scraped.values()), scraped
    assert cadence.throttled == 0


def test_over_budget_the_scrapes_are_shared_round_robin_and_the_budget_holds() -> None:
    cadence = Cadence(0.1, idle_interval_s=0.5, idle_after=0, budget_cores=0.5, dispatched=lambda _: 0)
    for i in range(1000):
        cadence.add(f"p{i}", 0.0, phase=(i % 100) * 0.001)
    # 1000 pods x 10/s x 100 µs = 1 core wanted, 0.5 allowed: each pod every ~200 ms, none starved
    scraped = _run(cadence, 10.0, 0.002, 100e-6, quiet=False)
    total = sum(scraped.values())
    assert total * 100e-6 <= 0.5 * 10.0 * 1.02  # the CPU spent stays within the budget
    assert total >= 0.5 * 10.0 / 100e-6 * 0.95  # and the budget is used, not wasted
    counts = sorted(scraped[f"p{i}"] for i in range(1000))
    assert counts[-1] - counts[0] <= 2, (counts[0], counts[-1])  # fair: nobody starves
    assert cadence.throttled > 0


def test_a_quiet_pod_is_scraped_at_the_idle_interval_and_at_once_after_a_dispatch() -> None:
    dispatched = {"p0": 0}
    cadence = Cadence(0.1, idle_interval_s=0.5, idle_after=3, budget_cores=0, dispatched=dispatched.get)
    cadence.add("p0", 0.0)
    starts: list[float] = []
    now = 0.0
    while now < 3.0:
        if now >= 2.02 and dispatched["p0"] == 0:
            dispatched["p0"] = 1  # the gateway sent it a request
        for name in cadence.due(now):
            starts.append(now)
            cadence.finished(name, now, cpu_s=None, quiet=dispatched["p0"] == 0)
            dispatched["p0"] = 0 if now < 2.0 else dispatched["p0"]
        now = round(now + 0.01, 6)
    gaps = [round(b - a, 2) for a, b in itertools.pairwise(starts)]
    # 3 quiet scrapes at the fast interval (the third makes it idle), then the idle interval...
    assert gaps[:2] == [0.1, 0.1]
    idle = [g for g, at in zip(gaps, starts[1:], strict=False) if 0.6 <= at < 2.0]
    assert idle and all(g == 0.5 for g in idle), gaps
    # ...and the first check after the dispatch (≤ one fast interval) scrapes it, then fast again
    after = [at for at in starts if at >= 2.02]
    assert after[0] - 2.02 <= 0.1 + 1e-9
    fast = [round(b - a, 2) for a, b in itertools.pairwise(after)]
    assert len(fast) >= 8 and max(fast) <= 0.11  # (the 10 ms clock steps round some gaps up)


def test_a_pod_in_flight_is_not_started_twice_and_a_removed_one_never_again() -> None:
    cadence = Cadence(0.1, idle_interval_s=0.5, idle_after=0, budget_cores=0, dispatched=lambda _: 0)
    cadence.add("slow", 0.0)
    cadence.add("gone", 0.0)
    assert sorted(cadence.due(0.0)) == ["gone", "slow"]
    cadence.finished("gone", 0.0, cpu_s=None, quiet=False)
    cadence.remove("gone")
    assert cadence.due(0.5) == []  # "slow" still in flight, "gone" removed
    cadence.finished("slow", 0.6, cpu_s=None, quiet=False)
    assert cadence.due(0.6) == ["slow"]  # it outlasted its interval: due again at once


def test_a_skipped_pod_is_checked_again_one_interval_later() -> None:
    cadence = Cadence(0.1, idle_interval_s=0.5, idle_after=0, budget_cores=0, dispatched=lambda _: 0)
    cadence.add("theirs", 0.0)
    assert cadence.due(0.0, skip=lambda _: True) == []
    assert cadence.due(0.05) == []
    assert cadence.due(0.1) == ["theirs"]
