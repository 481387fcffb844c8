"""On a bursty trace in simulated time (deterministic: seeded, no wall clock), the default
`latency` profile beats the reference picker, least-in-flight and round-robin on TTFT.

p90 and mean are compared with every baseline; p99 (the ~10th worst of a short run, noisy from seed
to seed against the evenly spreading baselines) only with the reference picker, which it beats by
a wide margin."""

from __future__ import annotations

import pytest

from bench.pick_sim import run


@pytest.mark.parametrize("adapter_share", [0.0, 0.2])
def test_latency_profile_has_the_best_ttft(adapter_share: float) -> None:
    outcomes = {
        name: run(name, n_pods=6, seconds=12.0, rate=50.0, seed=3, adapter_share=adapter_share)
        for name in ("latency", "reference", "least-inflight", "round-robin")
    }
    ours = outcomes.pop("latency")
    for name, other in outcomes.items():
        assert ours.p90 < other.p90, (name, ours, other)
        assert ours.mean < other.mean, (name, ours, other)
    assert ours.p99 < outcomes["reference"].p99 / 2
