"""`/ready`'s decision: a routable cluster, and Redis answered once since start (then latched)."""

from __future__ import annotations

from common.config.router import Selection
from global_router.dispatch_tracker import DispatchTracker
from global_router.fleet_view import MemoryFleetView
from global_router.readiness import Readiness
from global_router.selection import ClusterSelector
from tests.global_router.fleet_fixtures import cluster


async def test_ready_needs_a_routable_cluster_and_one_redis_answer() -> None:
    fleet = MemoryFleetView(ttl_s=300)
    selector = ClusterSelector(Selection(), stale_after_s=3.0, tracker=DispatchTracker())
    redis_up = [False]

    async def ping() -> bool:  # stands in for redis.ping(): raises while Redis is down
        if not redis_up[0]:
            raise ConnectionError("redis down")
        return True

    ready = Readiness(fleet, selector, ping)
    assert await ready.check() == (False, {"ready": False, "routable_clusters": 0, "redis_answered": False})
    await fleet.publish(cluster("a"))
    ok, detail = await ready.check()
    assert not ok and detail["routable_clusters"] == 1 and not detail["redis_answered"]
    redis_up[0] = True
    assert (await ready.check())[0]
    redis_up[0] = False  # a later Redis outage must not pull every replica out of the load balancer
    assert (await ready.check())[0]
    await fleet.publish(cluster("a", draining=True))  # nothing left to route to: not ready
    assert not (await ready.check())[0]
