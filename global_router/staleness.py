"""How a stale capacity report counts in cluster selection: aged toward caution, not demoted.

Static stability (docs/global-router-resilience.md): between `capacity.staleAfterS` and
`capacity.forgetAfterS` a cluster's last report is all the router knows of it, and an agent falls
silent for reasons that leave the data plane intact (a partition between agents and router, a busy
machine, a restarted replica). Ranking every stale cluster behind every fresh one sent a partitioned
region's own traffic to a fresh region 150 ms away although nothing said its clusters were failing;
a cluster that really fails is found by its requests (`cluster_failure.py`, ejection in
`failover.py`), within milliseconds. So a stale report keeps ranking on its figures, aged:

- trust = staleAfterS / age (1 while fresh): the older the report, the less of it is believed;
- headroom = reported x trust, minus what this replica still has in flight there that the report
  cannot show (the fewer of: requests sent since the report, requests in flight). While fresh, every
  request sent since the report counts, as the next report will show what is left of them; a report
  that stopped coming will never show them, and the ones that finished no longer load the cluster,
  so counting them would drive a silent cluster's headroom ever lower with no end;
- predicted TTFT + `selection.stalePenaltyMs` x (1 - trust): a bounded penalty, from 0 at
  staleAfterS toward the bound, that breaks ties toward a fresh cluster of the same region. Keep it
  below the smallest cross-region latency: staleness alone must never move traffic out of its region.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class StaleAging:
    stale_after_s: float
    penalty_ms: float

    def is_stale(self, age_s: float) -> bool:
        return age_s > self.stale_after_s

    def trust(self, age_s: float) -> float:
        """How much of a report of age `age_s` is believed: 1 while fresh, staleAfterS / age after."""
        return 1.0 if not self.is_stale(age_s) else self.stale_after_s / age_s

    def headroom(self, reported: int, age_s: float, *, dispatched_since: int, inflight: int) -> int:
        """Requests the cluster can still take, as this replica estimates it (negative: overbooked)."""
        if not self.is_stale(age_s):
            return reported - dispatched_since
        return int(max(0, reported) * self.trust(age_s)) - min(dispatched_since, inflight)

    def ttft_penalty_ms(self, age_s: float) -> float:
        """Milliseconds added to a stale cluster's predicted TTFT; 0 while fresh, < penaltyMs always."""
        return self.penalty_ms * (1.0 - self.trust(age_s))
