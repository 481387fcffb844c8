"""One router replica loses Redis (a full partition of its link): both replicas keep answering every
request, each keeps routing to every cluster — the one whose agent reports to the other replica on
last-known data (static stability) — and the replica catches up when the link heals.

Each cluster serves local clients throughout, and the partition begins once both replicas hold
each cluster's measured figures: how an idle cluster's priors compare with a busy one's is
`test_client_region_latency`'s subject, not this one's."""

from __future__ import annotations

import asyncio
import time

import pytest

from fleetgate.netbed.bed import MODEL, Testbed
from fleetgate.netbed.load import Request, failures, run_load, wait_for
from fleetgate.netbed.scenarios import TWO_REGIONS

pytestmark = [pytest.mark.netns, pytest.mark.timeout(180), pytest.mark.topology(TWO_REGIONS)]

PARTITION_S = 3 * TWO_REGIONS.stale_after_s
HOME = {"us-east": "use1", "eu-west": "euw1"}


def _throughputs(bed: Testbed, replica: int) -> dict[str, float]:
    """Each cluster's reported per-GPU throughput at `replica`: a prior until its pods have served."""
    try:
        doc = bed.fleet(replica)
    except Exception:
        return {}
    return {c["id"]: c["models"].get(MODEL, {}).get("gpu_tokens_per_s", 0.0) for c in doc["clusters"]}


async def test_replica_partitioned_from_redis_keeps_serving(bed: Testbed) -> None:
    stop = asyncio.Event()
    async with (
        bed.client(bed.ingress(0), keepalive=False) as r0,
        bed.client(bed.ingress(1), keepalive=False) as r1,
        bed.client(bed.local("use1")) as l0,
        bed.client(bed.local("euw1")) as l1,
    ):
        cold = _throughputs(bed, 0)
        local = [
            asyncio.create_task(run_load(c, lambda i: bed.auth(), workers=1, until=stop, max_requests=800))
            for c in (l0, l1)
        ]
        routed: dict[tuple[int, str], asyncio.Task[list[Request]]] = {}
        try:

            def measured() -> bool:
                views = [_throughputs(bed, r) for r in (0, 1)]
                return all(set(v) == set(HOME.values()) and all(v[c] != cold[c] for c in v) for v in views)

            await wait_for(measured, 30, "both replicas holding both clusters' measured figures")
            bed.partition("redis:0", "full")
            began = time.monotonic()
            routed = {
                (rep, region): asyncio.create_task(
                    run_load(
                        c, lambda i, g=region: bed.auth(region=g), workers=1, until=stop, max_requests=200
                    )
                )
                for rep, c in enumerate((r0, r1))
                for region in HOME
            }
            await asyncio.sleep(PARTITION_S)  # the scenario's length, not a synchronisation
            # each replica's own view: what it would route to (fresh, or stale on last-known data)
            seen = [bed.routable_at(0), bed.routable_at(1)]
        finally:
            stop.set()
            done: dict[tuple[int, str], list[Request]] = {k: await t for k, t in routed.items()}
            await asyncio.gather(*local)
    for (rep, region), reqs in done.items():
        assert reqs and not failures(reqs), f"replica {rep}, {region} clients: {failures(reqs)[:5]}"
    assert seen == [{"use1", "euw1"}] * 2, f"clusters left a replica's rotation: {seen}"
    # late in the partition each replica knows one cluster only from its last report, and still
    # sends that cluster's region home to it
    late_after = began + 2 * TWO_REGIONS.stale_after_s
    for (rep, region), reqs in done.items():
        late = [r for r in reqs if r.started > late_after]
        assert late, f"no late {region} request through replica {rep}"
        home = sum(r.cluster == HOME[region] for r in late) / len(late)
        assert home >= 0.5, f"replica {rep} sent {home:.0%} of late {region} traffic home"
    bed.heal("redis:0")
    await wait_for(lambda: all(bed.fresh_at(r) == {"use1", "euw1"} for r in (0, 1)), 20, "both views whole")
