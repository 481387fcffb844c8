"""The path from the router to one cluster is black-holed (packets vanish; the agent's reports still
arrive, so the cluster looks healthy): its clients' requests are still answered in bounded time, by
another cluster, instead of waiting out the multi-minute stream read timeout."""

from __future__ import annotations

import asyncio

import pytest

from fleetgate.netbed.bed import Testbed
from fleetgate.netbed.load import failures, one
from fleetgate.netbed.scenarios import TWO_REGIONS

pytestmark = [pytest.mark.netns, pytest.mark.timeout(180), pytest.mark.topology(TWO_REGIONS)]

ANSWER_WITHIN_S = 10.0


async def test_black_holed_data_path_fails_over_in_bounded_time(bed: Testbed) -> None:
    bed.partition("gw:euw1", "full")
    bed.link("reset", "gw:euw1")  # pooled connections die with the path, as their packets would
    async with bed.client(bed.ingress(), timeout_s=ANSWER_WITHIN_S + 5) as client:
        reqs = await asyncio.gather(*(one(client, bed.auth(region="eu-west")) for _ in range(4)))
    slow = [r for r in reqs if r.finished - r.started > ANSWER_WITHIN_S]
    assert not slow, f"{len(slow)} of {len(reqs)} requests waited more than {ANSWER_WITHIN_S:.0f} s"
    assert not failures(reqs), failures(reqs)
    assert {r.cluster for r in reqs} == {"use1"}
