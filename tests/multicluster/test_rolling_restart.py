"""Every gateway, then every router replica, restarted one at a time under steady load (streaming and
not): not one admitted request is lost. Each SIGTERM drains (docs/drain.md): a gateway reports itself
draining and waits for the router's ack before it stops accepting, a replica answers `/ready` 503,
and both finish what is in flight, so no request even needs a retry."""

from __future__ import annotations

import asyncio
import time

import pytest

from fleetgate.netbed.bed import ROUTER_HTTP_PORT, Testbed
from fleetgate.netbed.load import failures, run_load, wait_for
from fleetgate.netbed.scenarios import TWO_REGIONS

pytestmark = [pytest.mark.netns, pytest.mark.timeout(240), pytest.mark.topology(TWO_REGIONS)]

REGIONS = ["us-east", "eu-west"]


async def test_rolling_restart_loses_no_admitted_request(bed: Testbed) -> None:
    stop = asyncio.Event()
    g_leaf = bed.ips["global"][1]
    routers = list(range(bed.topo.routers))
    # a client of the balancer opens a fresh connection per request, so a replica taken out of the
    # balancer gets no new request while it drains (keep-alive reuse is the client library's business)
    async with bed.client(bed.ingress(), keepalive=False) as client:
        load = asyncio.create_task(
            run_load(
                client,
                lambda i: bed.auth(region=REGIONS[i % 2]),
                workers=4,
                until=stop,
                max_requests=5000,
                stream_every=3,
            )
        )
        t0 = time.monotonic()
        try:
            for c in bed.topo.clusters:
                await asyncio.to_thread(
                    bed.restart, f"gw-{c.cluster_id}", ready=r"cluster gateway .* listening on"
                )
                await wait_for(
                    lambda cid=c.cluster_id: all(cid in bed.fresh_at(r) for r in routers),
                    40,
                    f"{c.cluster_id} back",
                )
            for r in routers:
                others = [f"{g_leaf}:{ROUTER_HTTP_PORT + o}" for o in routers if o != r]
                bed.link("targets", "ingress", targets=others)  # out of the balancer first, then drain
                await asyncio.to_thread(bed.restart, f"router{r}", ready=r"global router listening on")
                await wait_for(
                    lambda r=r: bed.fresh_at(r) == {"use1", "euw1"}, 40, f"replica {r} sees the fleet"
                )
                bed.link("targets", "ingress", targets=[f"{g_leaf}:{ROUTER_HTTP_PORT + o}" for o in routers])
        finally:
            stop.set()
            reqs = await load
    took = time.monotonic() - t0
    assert len(reqs) > 50, f"only {len(reqs)} requests in {took:.0f} s"
    assert any(r.status == 200 and r.error == "" for r in reqs)
    assert not failures(reqs), f"{len(failures(reqs))} of {len(reqs)} lost: {failures(reqs)[:8]}"
