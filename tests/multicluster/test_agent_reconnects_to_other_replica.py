"""An agent whose router replica dies reconnects, through the L4 balancer, to the other replica, and
its cluster never leaves the surviving replica's rotation."""

from __future__ import annotations

import signal
import time

import pytest

from fleetgate.netbed.bed import Testbed
from fleetgate.netbed.load import failures, one, wait_for
from fleetgate.netbed.scenarios import TWO_REGIONS

pytestmark = [pytest.mark.netns, pytest.mark.timeout(180), pytest.mark.topology(TWO_REGIONS)]


async def test_agent_reconnects_to_the_other_replica(bed: Testbed) -> None:
    # use1 is cluster 0: its agent's balancer prefers replica 0 (started before any gateway)
    await wait_for(lambda: bed.agent_connected(0, "use1"), 10, "use1's agent at replica 0")
    assert not bed.agent_connected(1, "use1")
    bed.procs["router0"].stop(signal.SIGKILL)
    killed = time.monotonic()
    in_rotation_throughout = True

    def moved() -> bool:
        # replica 1 may refuse the agent until the dead replica's stream lease lapses (one stream
        # per cluster, docs/security.md); meanwhile use1 stays routable on its last report
        nonlocal in_rotation_throughout
        in_rotation_throughout &= "use1" in bed.routable_at(1)
        return bed.agent_connected(1, "use1")

    await wait_for(moved, 15, "use1's agent connected to replica 1")
    reconnect_s = time.monotonic() - killed
    assert in_rotation_throughout, "use1 dropped out of replica 1's rotation while its agent moved"
    # replica 1 now hears use1 first hand: its reports keep coming
    seq = next(c["seq"] for c in bed.fleet(1)["clusters"] if c["id"] == "use1")
    await wait_for(
        lambda: next(c["seq"] for c in bed.fleet(1)["clusters"] if c["id"] == "use1") > seq + 2,
        10,
        "new use1 reports at replica 1",
    )
    async with bed.client(bed.ingress(1)) as client:
        reqs = [await one(client, bed.auth(region="us-east")) for _ in range(5)]
    assert not failures(reqs), failures(reqs)
    assert reconnect_s < 15
