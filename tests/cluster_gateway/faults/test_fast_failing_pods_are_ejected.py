"""Pods that fail instantly (a broken CUDA context answers 503 in a millisecond) are ejected and
cost the client nothing: issue 11, 'a fast-failing pod attracts traffic'."""

from __future__ import annotations

import time
from collections.abc import Callable

import httpx
import pytest

from tests.cluster_gateway.integration.conftest import running, served_requests, tiny

from .helpers import load, success_share, until


async def load_until(c: httpx.AsyncClient, cond: Callable[[], bool], within_s: float = 10.0) -> float:
    """Batches of 8 requests until `cond` holds; the seconds that took (bounded)."""
    t0 = time.monotonic()
    n = 0
    while not cond():
        assert time.monotonic() - t0 < within_s, "condition not reached under load"
        await load(c, 8, stream=False, prefix=f"u{n}-")
        n += 1
    return time.monotonic() - t0


@pytest.mark.parametrize("status", [503, 500])
async def test_two_of_three_pods_answering_5xx_are_ejected_within_a_second(status: int) -> None:
    async with running([tiny(), tiny(), tiny()]) as (fleet, gw, c):
        bad = {fleet.urls[0], fleet.urls[1]}
        fleet.set_fault(0, "error", rate=1.0, status=status)
        fleet.set_fault(1, "error", rate=1.0, status=status)
        # from the first failing requests on, under steady load
        took = await load_until(c, lambda: set(gw.outliers.ejected()) == bad)
        assert took < 1.0, f"ejection took {took:.2f} s"
        before = served_requests(fleet, 2)
        plain = await load(c, 200, stream=False, prefix="p")
        streams = await load(c, 100, stream=True, prefix="s")
        assert success_share(plain) >= 0.99, [o for o in plain if not o.ok][:3]
        assert success_share(streams) >= 0.99, [o for o in streams if not o.ok][:3]
        assert {o.pod for o in plain + streams} == {fleet.urls[2]}
        # every request was generated exactly once, on the healthy pod, with one completion id
        assert served_requests(fleet, 2) - before == sum(o.ok for o in plain + streams)
        assert all(len(o.ids) == 1 for o in plain + streams if o.ok)
        metrics = (await c.get("/metrics")).text
        assert "fleetgate_gateway_ejected_pods 2.0" in metrics
        assert 'fleetgate_gateway_pod_ejections_total{reason="consecutive_5xx"} 2.0' in metrics
        assert (await c.get("/ready")).status_code == 200  # one pod still serves


async def test_one_of_three_pods_answering_503_costs_no_request() -> None:
    async with running([tiny(), tiny(), tiny()]) as (fleet, gw, c):
        fleet.set_fault(0, "error", rate=1.0, status=503)
        outs = await load(c, 120, stream=False, prefix="a") + await load(c, 60, stream=True, prefix="b")
        assert success_share(outs) == 1.0, [o for o in outs if not o.ok][:3]
        assert gw.outliers.ejected() == [fleet.urls[0]]


async def test_an_ejected_pod_gets_traffic_again_once_it_recovers() -> None:
    od = {"baseEjectionTimeS": 0.5}
    async with running([tiny(), tiny(), tiny()], proxy={"outlierDetection": od}) as (fleet, gw, c):
        fleet.set_fault(0, "error", rate=1.0, status=503)
        await load_until(c, lambda: fleet.urls[0] in gw.outliers.ejected())
        fleet.set_fault(0, "none")
        await until(lambda: not gw.outliers.ejected(), 5, "ejection ends")
        await load_until(c, lambda: served_requests(fleet, 0) > 0)  # its probe, then its share


async def test_two_of_three_pods_answering_429_lose_their_place_and_requests_succeed() -> None:
    async with running([tiny(), tiny(), tiny()]) as (fleet, gw, c):
        fleet.set_fault(0, "429", rate=1.0)
        fleet.set_fault(1, "429", rate=1.0)
        plain = await load(c, 200, stream=False, prefix="p")
        streams = await load(c, 100, stream=True, prefix="s")
        assert success_share(plain) >= 0.99, [o for o in plain if not o.ok][:3]
        assert success_share(streams) >= 0.99, [o for o in streams if not o.ok][:3]
        assert gw.outliers.ejected() == []  # overload is not a broken pod
        assert served_requests(fleet, 2) == sum(o.ok for o in plain + streams)  # none generated twice
