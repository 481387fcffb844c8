"""A region partitioned from the router (its agent's reports cannot reach either replica, the data
path still works): the region's gateway keeps serving its local clients, other regions are
unaffected, and the router keeps sending the region's traffic there on last-known data."""

from __future__ import annotations

import asyncio
import time

import pytest

from fleetgate.netbed.bed import Testbed
from fleetgate.netbed.load import failures, run_load, wait_for
from fleetgate.netbed.scenarios import TWO_REGIONS

pytestmark = [pytest.mark.netns, pytest.mark.timeout(180), pytest.mark.topology(TWO_REGIONS)]

# well past staleAfterS (3 s): long enough that a router without static stability has dropped it
PARTITION_S = 3 * TWO_REGIONS.stale_after_s
BASELINE_S = 3.0


async def _partitioned_window(bed: Testbed) -> tuple[list, list, list, list, float]:
    """BASELINE_S of load, then use1's agent link partitioned for PARTITION_S under the same load;
    returns (us-east via router before, us-east via router during, eu-west via router during, local
    use1 traffic during, when the partition began)."""
    async with (
        bed.client(bed.ingress(), keepalive=False) as routed,
        bed.client(bed.local("use1")) as local,
    ):

        async def window(seconds: float) -> list[list]:
            stop = asyncio.Event()
            tasks = [
                asyncio.create_task(x)
                for x in (
                    run_load(
                        routed, lambda i: bed.auth(region="us-east"), workers=2, until=stop, max_requests=400
                    ),
                    run_load(
                        routed, lambda i: bed.auth(region="eu-west"), workers=2, until=stop, max_requests=400
                    ),
                    run_load(local, lambda i: bed.auth(), workers=1, until=stop, max_requests=400),
                )
            ]
            await asyncio.sleep(seconds)  # the scenario's length, not a synchronisation
            stop.set()
            return list(await asyncio.gather(*tasks))

        before, _, _ = await window(BASELINE_S)
        bed.partition("agent:use1", "full")
        began = time.monotonic()
        us, eu, loc = await window(PARTITION_S)
    return before, us, eu, loc, began


async def test_partitioned_region_serves_locally_and_others_are_unaffected(bed: Testbed) -> None:
    _, us, eu, loc, _ = await _partitioned_window(bed)
    assert loc and not failures(loc), f"local traffic in the partitioned region failed: {failures(loc)[:5]}"
    assert all(r.cluster == "" for r in loc)  # straight to the gateway: no router hop
    assert eu and not failures(eu), f"the other region was affected: {failures(eu)[:5]}"
    assert not failures(us), f"us-east clients lost requests: {failures(us)[:5]}"
    # the agent's link heals: the region is back in every replica's view
    bed.heal("agent:use1")
    await wait_for(lambda: all("use1" in bed.fresh_at(r) for r in (0, 1)), 20, "use1 fresh again")


async def test_partitioned_region_stays_routable_on_last_known_data(bed: Testbed) -> None:
    before, us, _, _, began = await _partitioned_window(bed)
    home_before = sum(r.cluster == "use1" for r in before) / max(1, len(before))
    assert home_before > 0.5, f"use1 served only {home_before:.0%} of us-east traffic before the partition"
    late = [r for r in us if r.started > began + 2 * TWO_REGIONS.stale_after_s]
    assert late, "no us-east request in the late part of the partition"
    assert not failures(late), f"us-east requests failed: {failures(late)[:5]}"
    home_late = sum(r.cluster == "use1" for r in late) / len(late)
    # on last-known data the router keeps sending the region's traffic home, about as before
    assert home_late >= home_before / 2, (
        f"use1 served {home_late:.0%} of late us-east traffic during the partition ({home_before:.0%} before)"
    )
