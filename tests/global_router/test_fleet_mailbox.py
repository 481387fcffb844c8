"""The mailbox applies posted states in order, newest per cluster, without the poster waiting."""

from __future__ import annotations

import asyncio
import threading

from global_router.fleet_mailbox import FleetMailbox
from global_router.fleet_view import ClusterState, MemoryFleetView
from tests.eventually import eventually


def _state(cid: str, seq: int) -> ClusterState:
    return ClusterState(
        cluster_id=cid,
        region="r",
        zone="",
        gateway_url="http://gw:1",
        seq=seq,
        received_at=1e9 + seq,
        models={},
        cost_per_gpu_hour=1.0,
        gpus=1,
        capacity_type="on-demand",
        draining=False,
    )


async def test_states_posted_from_another_thread_reach_the_fleet_view_newest_last() -> None:
    fleet = MemoryFleetView(ttl_s=1e12)
    box = FleetMailbox(fleet, asyncio.get_running_loop())
    box.start()

    def post() -> None:
        loop = asyncio.new_event_loop()
        for seq in range(1, 201):
            loop.run_until_complete(box.publish(_state("a" if seq % 2 else "b", seq)))
        loop.close()

    t = threading.Thread(target=post)
    t.start()
    await asyncio.to_thread(t.join)
    await eventually(lambda: (a := fleet.get("a")) is not None and a.seq == 199, what="a's newest")
    await eventually(lambda: (b := fleet.get("b")) is not None and b.seq == 200, what="b's newest")
    assert box.applied <= 200  # states not yet applied were coalesced, never replayed out of order
    await box.stop()


async def test_a_state_posted_just_before_stop_is_applied() -> None:
    fleet = MemoryFleetView(ttl_s=1e12)
    box = FleetMailbox(fleet, asyncio.get_running_loop())
    box.start()
    await box.publish(_state("a", 7))
    await box.stop()
    got = fleet.get("a")
    assert got is not None and got.seq == 7
