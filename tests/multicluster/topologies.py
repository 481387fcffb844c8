"""The fleets the scenarios run on: regions 20-150 ms (one way) from the global router's namespace."""

from __future__ import annotations

from fleetgate.netbed.bed import ClusterPlan, Topology

REGION_MS = {"us-east": 20.0, "eu-west": 60.0, "ap-south": 150.0}

TWO_REGIONS = Topology(
    (ClusterPlan("use1", "us-east"), ClusterPlan("euw1", "eu-west")),
    {r: REGION_MS[r] for r in ("us-east", "eu-west")},
)

THREE_REGIONS = Topology(
    (ClusterPlan("use1", "us-east"), ClusterPlan("euw1", "eu-west"), ClusterPlan("aps1", "ap-south")),
    REGION_MS,
)

# streams long enough to be cut mid-way: the simulator runs 4x slower than the `tiny` profile
SLOW_TWO_REGIONS = Topology(TWO_REGIONS.clusters, TWO_REGIONS.region_ms, time_scale=4.0)
