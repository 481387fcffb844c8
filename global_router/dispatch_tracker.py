"""What this replica has sent to each cluster that the cluster's last report cannot show yet.

Reports arrive every ~second; a burst in between would all go to the cluster that looked emptiest.
Counting dispatches since the report each cluster last sent (reset when a newer `seq` arrives) lets
selection subtract them from the reported headroom, the Tier-2 twin of the gateway's per-pod burst
guard. In-flight counts (sent, not finished) are kept too, for the fleet page and metrics.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(slots=True)
class _Counts:
    seq: int = -1
    since_report: int = 0
    inflight: int = 0
    total: int = 0


class DispatchTracker:
    def __init__(self) -> None:
        self._by_cluster: dict[str, _Counts] = {}

    def _get(self, cluster_id: str) -> _Counts:
        c = self._by_cluster.get(cluster_id)
        if c is None:
            c = self._by_cluster[cluster_id] = _Counts()
        return c

    def dispatched_since(self, cluster_id: str, seq: int) -> int:
        """Requests sent after the report numbered `seq` (0 once a newer report replaced it)."""
        c = self._by_cluster.get(cluster_id)
        if c is None or c.seq != seq:
            return 0
        return c.since_report

    def pending(self, cluster_id: str, seq: int) -> tuple[int, int]:
        """(`dispatched_since`, `inflight`) in one lookup: selection asks both per cluster."""
        c = self._by_cluster.get(cluster_id)
        if c is None:
            return 0, 0
        return (c.since_report if c.seq == seq else 0), c.inflight

    def on_dispatch(self, cluster_id: str, seq: int) -> None:
        c = self._get(cluster_id)
        if c.seq != seq:
            c.seq = seq
            c.since_report = 0
        c.since_report += 1
        c.inflight += 1
        c.total += 1

    def on_done(self, cluster_id: str) -> None:
        c = self._by_cluster.get(cluster_id)
        if c is not None and c.inflight > 0:
            c.inflight -= 1

    def inflight(self, cluster_id: str) -> int:
        c = self._by_cluster.get(cluster_id)
        return c.inflight if c else 0

    def total(self, cluster_id: str) -> int:
        c = self._by_cluster.get(cluster_id)
        return c.total if c else 0
