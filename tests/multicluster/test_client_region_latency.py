"""Cross-region latency decides where interactive traffic goes: with `x-fleetgate-client-region`
each region's clients are served at home, what they measure shows the WAN the bed built, and when
their region's cluster is lost they go to the nearest other region, not the farthest."""

from __future__ import annotations

import signal
import statistics

import pytest

from fleetgate.netbed.bed import Testbed
from fleetgate.netbed.load import failures, one, wait_for
from fleetgate.netbed.scenarios import THREE_REGIONS

pytestmark = [pytest.mark.netns, pytest.mark.timeout(180), pytest.mark.topology(THREE_REGIONS)]

HOME = {"us-east": "use1", "eu-west": "euw1", "ap-south": "aps1"}
N = 12  # sequential requests per client region


async def test_interactive_traffic_goes_to_the_clients_region(bed: Testbed) -> None:
    ms: dict[str, list[float]] = {}
    async with bed.client(bed.ingress()) as client:
        for region, home in HOME.items():
            reqs = [await one(client, bed.auth(region=region)) for _ in range(N)]
            assert not failures(reqs), f"{region}: {failures(reqs)[:5]}"
            served = [r.cluster for r in reqs]
            assert served.count(home) >= N - 1, f"{region} clients were served by {served}"
            ms[region] = [1000 * (r.finished - r.started) for r in reqs if r.cluster == home]
    # the WAN is real: a request to a region pays at least one round trip to it (2 x one-way latency)
    for region, samples in ms.items():
        rtt = 2 * THREE_REGIONS.region_ms[region]
        assert statistics.median(samples) >= rtt, (
            f"{region}: median {statistics.median(samples):.0f} ms < RTT {rtt} ms"
        )
    assert (
        statistics.median(ms["us-east"])
        < statistics.median(ms["eu-west"])
        < statistics.median(ms["ap-south"])
    )


async def test_lost_home_region_fails_over_to_the_nearest_other(bed: Testbed) -> None:
    # eu-west clients: us-east is 20 + 60 = 80 ms away, ap-south 60 + 150 = 210 ms
    bed.procs["gw-euw1"].stop(signal.SIGKILL)
    await wait_for(lambda: all("euw1" not in bed.fresh_at(r) for r in (0, 1)), 20, "euw1 out of rotation")
    async with bed.client(bed.ingress()) as client:
        reqs = [await one(client, bed.auth(region="eu-west")) for _ in range(N)]
    assert not failures(reqs), failures(reqs)[:5]
    served = [r.cluster for r in reqs]
    assert served.count("use1") >= N - 1, f"eu-west clients without their region went to {served}"
