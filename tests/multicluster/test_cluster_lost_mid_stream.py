"""A whole cluster dies while streams run through it: each of those streams ends at once with an SSE
error event (never a hang, never plain text) and new requests are served by the other region."""

from __future__ import annotations

import asyncio
import signal
import time

import pytest

from fleetgate.netbed.bed import Testbed
from fleetgate.netbed.load import failures, one, wait_for
from fleetgate.netbed.scenarios import SLOW_TWO_REGIONS

pytestmark = [pytest.mark.netns, pytest.mark.timeout(180), pytest.mark.topology(SLOW_TWO_REGIONS)]

STREAMS = 4


async def test_cluster_lost_mid_stream(bed: Testbed) -> None:
    async with bed.client(bed.ingress(), timeout_s=20) as client:
        warm = [await one(client, bed.auth(region="us-east")) for _ in range(3)]
        assert not failures(warm)
        streams = [
            asyncio.create_task(one(client, bed.auth(region="us-east"), stream=True, max_tokens=200))
            for _ in range(STREAMS)
        ]
        # the streams are running once use1's gateway holds them (its WAN link carries them)
        await wait_for(
            lambda: bed.link("stats", "gw:use1")["stats"]["forwarded_bytes"] > 2000, 10, "streams under way"
        )
        await asyncio.sleep(0.5)
        assert not any(s.done() for s in streams), "streams finished before the cluster was lost"
        for name in ("gw-use1", "sim-use1"):
            bed.procs[name].stop(signal.SIGKILL)
        lost_at = time.monotonic()
        results = await asyncio.wait_for(asyncio.gather(*streams), 10)
        after = [await one(client, bed.auth(region="us-east")) for _ in range(10)]
    broke = [r for r in results if r.cluster == "use1"]
    assert broke, f"no stream ran on use1: {[r.cluster for r in results]}"
    for r in broke:
        assert r.stream_error, f"a stream cut by the loss did not end in an SSE error event: {r}"
        assert r.finished - lost_at < 5, "a cut stream hung"
    assert not failures(after), f"requests after the loss failed: {failures(after)}"
    assert {r.cluster for r in after} == {"euw1"}
