"""The multi-cluster scenarios, defined once for every fleet that can run them.

The netns bed (`tests/multicluster/`, one test per scenario) and the kind flow (`deploy/kind/`: its
clusters come from `KIND_TOPOLOGY`, and `deploy/kind/scenarios.sh` runs `fleetgate.netbed.kind`)
both read this list, so a laptop with kind runs the same scenarios, with the same load, bounds and
loss check (`load.py`), as `make test` runs here. A scenario names what it needs of the fleet; a
fleet that lacks it (kind cannot black-hole one link between two clusters, for one) skips it and
says why. Standard library only: the kind scripts call it with any Python 3.

    python -m fleetgate.netbed.scenarios list                 # every scenario and where it runs
    python -m fleetgate.netbed.scenarios kind-clusters        # "<cluster id> <region>" lines
    python -m fleetgate.netbed.scenarios kind-plan            # what the kind runner runs or skips
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import dataclass

from fleetgate.netbed.topology import ClusterPlan, Topology

# one-way latency from the global router's site to each region
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
TOPOLOGIES = {
    "two-regions": TWO_REGIONS,
    "three-regions": THREE_REGIONS,
    "slow-two-regions": SLOW_TWO_REGIONS,
}
# kind builds the largest fleet once (a kind cluster per ClusterPlan); every scenario runs on it
KIND_TOPOLOGY = THREE_REGIONS

# What a scenario may need of the fleet beyond "clusters, gateways, a router, Redis":
#   partition   cut one link (agent->router, router->gateway, replica->Redis) and heal it
#   wan         real cross-region latency between the router and each region
#   two_routers two router replicas behind one balancer, each addressable on its own
#   local       clients inside a cluster, straight to its gateway
#   kill        SIGKILL one cluster's gateway (and pods) while requests run
#   restart     restart every gateway and router replica, one at a time, under load
NETNS_CAPABILITIES = frozenset({"partition", "wan", "two_routers", "local", "kill", "restart"})
KIND_CAPABILITIES = frozenset({"kill", "restart"})


@dataclass(frozen=True)
class Scenario:
    name: str
    topology: str  # a key of TOPOLOGIES
    needs: frozenset[str]
    proves: str
    netns_test: str  # tests/multicluster/<module>.py::<function>

    def missing_on(self, capabilities: frozenset[str]) -> frozenset[str]:
        return self.needs - capabilities


def _s(name: str, topology: str, needs: set[str], proves: str, test: str) -> Scenario:
    return Scenario(name, topology, frozenset(needs), proves, test)


SCENARIOS: tuple[Scenario, ...] = (
    _s(
        "region-partition-local",
        "two-regions",
        {"partition", "local"},
        "a region cut off from the router keeps serving its local clients; other regions lose nothing",
        "test_region_partition.py::test_partitioned_region_serves_locally_and_others_are_unaffected",
    ),
    _s(
        "region-partition-last-known",
        "two-regions",
        {"partition", "local"},
        "the router keeps sending a partitioned region's own traffic home on last-known data",
        "test_region_partition.py::test_partitioned_region_stays_routable_on_last_known_data",
    ),
    _s(
        "router-cut-from-redis",
        "two-regions",
        {"partition", "two_routers", "local"},
        "a replica without Redis keeps every cluster in rotation and each region's traffic home",
        "test_router_replica_partitioned_from_redis.py::test_replica_partitioned_from_redis_keeps_serving",
    ),
    _s(
        "client-region-home",
        "three-regions",
        {"wan"},
        "x-fleetgate-client-region keeps interactive traffic in its region, latency ordered by distance",
        "test_client_region_latency.py::test_interactive_traffic_goes_to_the_clients_region",
    ),
    _s(
        "lost-home-region-nearest",
        "three-regions",
        {"wan", "kill"},
        "clients whose region's cluster died go to the nearest other region",
        "test_client_region_latency.py::test_lost_home_region_fails_over_to_the_nearest_other",
    ),
    _s(
        "cluster-lost-mid-stream",
        "slow-two-regions",
        {"kill"},
        "streams on a cluster that dies end at once in an SSE error event; new requests go elsewhere",
        "test_cluster_lost_mid_stream.py::test_cluster_lost_mid_stream",
    ),
    _s(
        "rolling-restart",
        "two-regions",
        {"restart"},
        "every gateway, then every router replica, restarted under load: 0 admitted requests lost",
        "test_rolling_restart.py::test_rolling_restart_loses_no_admitted_request",
    ),
    _s(
        "black-holed-data-path",
        "two-regions",
        {"partition"},
        "a black-holed router->cluster path fails over within a bound while reports still arrive",
        "test_black_holed_data_path.py::test_black_holed_data_path_fails_over_in_bounded_time",
    ),
    _s(
        "agent-reconnects",
        "two-regions",
        {"two_routers", "kill"},
        "an agent whose replica died reconnects to the other; its cluster never leaves rotation",
        "test_agent_reconnects_to_other_replica.py::test_agent_reconnects_to_the_other_replica",
    ),
)


def by_name(name: str) -> Scenario:
    for s in SCENARIOS:
        if s.name == name:
            return s
    raise KeyError(f"no scenario {name!r}; known: {', '.join(s.name for s in SCENARIOS)}")


def plan(capabilities: frozenset[str]) -> list[tuple[Scenario, str]]:
    """Each scenario with '' (runs) or why it is skipped on a fleet with these capabilities."""
    out = []
    for s in SCENARIOS:
        missing = s.missing_on(capabilities)
        out.append((s, f"needs {', '.join(sorted(missing))}" if missing else ""))
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        prog="python -m fleetgate.netbed.scenarios", description=__doc__.split("\n")[0]
    )
    ap.add_argument("what", choices=["list", "kind-clusters", "kind-plan"])
    args = ap.parse_args(argv)
    if args.what == "kind-clusters":
        for c in KIND_TOPOLOGY.clusters:
            print(c.cluster_id, c.region)
    elif args.what == "kind-plan":
        for s, why in plan(KIND_CAPABILITIES):
            print(f"{s.name}\t{'run' if not why else 'skip: ' + why}")
    else:
        for s in SCENARIOS:
            where = "netns" + ("+kind" if not s.missing_on(KIND_CAPABILITIES) else "")
            print(f"{s.name}\t{where}\t{s.proves}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
