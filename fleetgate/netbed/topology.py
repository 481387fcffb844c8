"""What a multi-cluster scenario runs on: clusters, their regions and the WAN between them.

Plain data with no dependency beyond the standard library, so the netns bed (`bed.py`), the kind
scripts (`deploy/kind/`, through `python -m fleetgate.netbed.scenarios`) and the scenario list
(`scenarios.py`) share one definition.
"""

from __future__ import annotations

from dataclasses import dataclass

MODEL = "meta-llama/Llama-3.1-8B-Instruct"


@dataclass(frozen=True)
class ClusterPlan:
    cluster_id: str
    region: str
    pods: int = 2
    cost_per_gpu_hour: float = 2.5


@dataclass(frozen=True)
class Topology:
    """What to build. `region_ms`: one-way latency between the global namespace and each region."""

    clusters: tuple[ClusterPlan, ...]
    region_ms: dict[str, float]
    jitter_ms: float = 2.0
    routers: int = 2
    time_scale: float = 1.0
    stale_after_s: float = 3.0
    report_interval_ms: int = 250
    redis_report_ttl_s: float = 10.0
    limited_rpm: int = 600  # requests/minute of the `limited` tenant (limits accuracy across replicas)

    def __post_init__(self) -> None:
        missing = {c.region for c in self.clusters} - set(self.region_ms)
        if missing:
            raise ValueError(f"region_ms has no latency for {sorted(missing)}")

    def region_latency_matrix(self) -> dict[str, dict[str, float]]:
        """Client region -> cluster region, as the router is told: the path through the global hub."""
        regions = sorted(self.region_ms)
        return {
            a: {b: 0.0 if a == b else self.region_ms[a] + self.region_ms[b] for b in regions} for a in regions
        }

    def region_of(self, cluster_id: str) -> str:
        return next(c.region for c in self.clusters if c.cluster_id == cluster_id)
