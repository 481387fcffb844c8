"""Pods that hang, die with streams queued, freeze their metrics or flap: issue 11's other pod faults."""

from __future__ import annotations

import asyncio
import json
import time

from tests.cluster_gateway.integration.conftest import chat, freeze_scrapes, running, served_requests, tiny

from .helpers import is_openai_error, load, success_share, until

SLOW_SCRAPES = {"intervalMs": 5000, "maxStalenessMs": 20000}  # the pool keeps believing the pod is fine


async def test_a_hung_pod_costs_a_request_at_most_the_first_byte_timeout() -> None:
    async with running([tiny(), tiny(), tiny()], proxy={"firstByteTimeoutS": 1.0}) as (fleet, gw, c):
        fleet.set_fault(0, "hang")
        outs = await load(c, 24, stream=False, concurrency=4) + await load(c, 12, stream=True, concurrency=4)
        assert success_share(outs) == 1.0, [o for o in outs if not o.ok][:3]
        assert fleet.urls[0] not in {o.pod for o in outs}
        assert all(o.content_type.split(";")[0] in ("application/json", "text/event-stream") for o in outs)
        # one first-byte timeout, then the next pod (plus slack for a loaded 2-core machine)
        assert max(o.seconds for o in outs) < 1.0 + 2.0, sorted(o.seconds for o in outs)[-3:]
        slow = [o for o in outs if o.seconds >= 1.0]
        assert slow, "no request ever waited for the hung pod"
        # out of rotation: ejected after five timeouts in a row, or dead by its hung scrapes first
        pod = gw.pool.get(fleet.urls[0])
        assert pod is not None
        assert fleet.urls[0] in gw.outliers.ejected() or pod.stale


async def test_every_pod_hung_gives_a_json_503_after_the_timeouts() -> None:
    spec = {"firstByteTimeoutS": 0.5}
    async with running([tiny(), tiny()], proxy=spec) as (fleet, _gw, c):
        fleet.set_fault(0, "hang")
        fleet.set_fault(1, "hang")
        for stream in (False, True):
            t0 = time.monotonic()
            r = await c.post("/v1/chat/completions", json=chat("x", stream=stream))
            assert time.monotonic() - t0 < 2 * 0.5 + 2.0
            assert r.status_code == 503
            assert r.headers["content-type"] == "application/json"
            assert is_openai_error(r.json())


async def test_a_killed_pod_loses_none_of_its_queued_streams() -> None:
    pods = [tiny(max_num_seqs=1, time_scale=6.0), tiny(), tiny()]
    async with running(pods, scrape=SLOW_SCRAPES) as (fleet, gw, c):
        freeze_scrapes(gw)
        doomed = fleet.urls[0]
        for other in fleet.urls[1:]:  # the pool sees pods 1 and 2 busy: everything goes to pod 0
            for _ in range(20):
                gw.pool.acquire(other)
        first_token = asyncio.Event()

        async def stream(i: int) -> tuple[str, list[str]]:
            body = chat(f"q{i}", max_tokens=48, stream=True)
            lines: list[str] = []
            async with c.stream("POST", "/v1/chat/completions", json=body) as r:
                assert r.status_code == 200
                pod = r.headers["x-fleetgate-pod"]
                async for line in r.aiter_lines():
                    if line.startswith("data: "):
                        lines.append(line[6:])
                        first_token.set()
            return pod, lines

        tasks = [asyncio.create_task(stream(0))]
        await until(lambda: fleet.state(0)["num_requests_running"] == 1, 10, "first stream running")
        tasks += [asyncio.create_task(stream(i)) for i in range(1, 6)]
        await until(lambda: fleet.state(0)["num_requests_waiting"] == 5, 10, "five streams queued")
        await asyncio.wait_for(first_token.wait(), 10)
        fleet.set_fault(0, "crash")
        results = await asyncio.wait_for(asyncio.gather(*tasks), 30)
        started, queued = results[0], results[1:]
        # the stream that had tokens: ends visibly, with an OpenAI error event and [DONE]
        assert started[0] == doomed
        data = started[1]
        assert data[-1] == "[DONE]"
        assert is_openai_error(json.loads(data[-2]))
        # the queued ones: none lost, each served once, elsewhere, complete
        for pod, data in queued:
            assert pod != doomed
            assert data[-1] == "[DONE]"
            objs = [json.loads(d) for d in data[:-1]]
            assert not any(is_openai_error(o) for o in objs)
            assert len({o["id"] for o in objs}) == 1  # one generation, not a restart mid-stream
        assert served_requests(fleet, 1) + served_requests(fleet, 2) == 5


async def test_frozen_metrics_under_traffic_mark_the_pod_stale_until_they_move_again() -> None:
    scrape = {"intervalMs": 50, "frozenAfterScrapes": 5}
    async with running([tiny(), tiny(), tiny()], scrape=scrape) as (fleet, gw, c):
        frozen = fleet.urls[0]
        pod = gw.pool.get(frozen)
        assert pod is not None
        fleet.set_fault(0, "stale")
        t0 = time.monotonic()
        while not pod.stale:  # steady load: the gateway keeps dispatching to it meanwhile
            assert time.monotonic() - t0 < 10, "frozen metrics never noticed"
            await load(c, 6, stream=False, concurrency=3)
        assert pod.consecutive_failures == 0  # its scrapes answer: stale, not dead
        outs = await load(c, 30, stream=False, concurrency=3)
        assert success_share(outs) == 1.0
        assert frozen not in {o.pod for o in outs}
        metrics = (await c.get("/metrics")).text
        assert 'fleetgate_scrape_failures_total{reason="frozen"}' in metrics
        fleet.set_fault(0, "none")
        await until(lambda: not pod.stale, 5, "fresh again")


async def test_an_idle_pod_with_unchanging_metrics_is_not_frozen() -> None:
    scrape = {"intervalMs": 20, "frozenAfterScrapes": 3}
    async with running([tiny(), tiny()], scrape=scrape) as (fleet, gw, c):
        fleet.set_fault(0, "stale")
        pod = gw.pool.get(fleet.urls[0])
        assert pod is not None
        # many scrapes pass with no request sent to it
        n0 = _scrapes(await c.get("/metrics"))
        t0 = time.monotonic()
        while _scrapes(await c.get("/metrics")) < n0 + 20:
            assert time.monotonic() - t0 < 10
            await asyncio.sleep(0.02)
        assert not pod.stale


def _scrapes(r: object) -> float:
    text = r.text  # type: ignore[attr-defined]
    for ln in text.splitlines():
        if ln.startswith("fleetgate_scrape_duration_seconds_count"):
            return float(ln.split()[-1])
    return 0.0


async def test_a_flapping_pod_costs_no_request() -> None:
    async with running([tiny(), tiny(), tiny()], proxy={"outlierDetection": {"baseEjectionTimeS": 0.3}}) as (
        fleet,
        _gw,
        c,
    ):
        stop = asyncio.Event()

        async def flap() -> None:
            broken = False
            while not stop.is_set():
                broken = not broken
                if broken:
                    fleet.set_fault(0, "error", rate=1.0, status=503)
                else:
                    fleet.set_fault(0, "none")
                await asyncio.sleep(0.15)

        flapper = asyncio.create_task(flap())
        try:
            outs = await load(c, 200, stream=False, concurrency=4) + await load(
                c, 60, stream=True, concurrency=4
            )
        finally:
            stop.set()
            await flapper
        assert success_share(outs) >= 0.99, [o for o in outs if not o.ok][:3]
        assert all(json_or_sse(o.content_type) for o in outs)
        # while it fails it is demoted (probed once per interval), so few attempts hit it; while it
        # works it keeps serving its share
        metrics = (await c.get("/metrics")).text
        retries = sum(
            float(ln.split()[-1])
            for ln in metrics.splitlines()
            if ln.startswith("fleetgate_gateway_retries_total")
        )
        assert retries <= 0.2 * len(outs) + 10, retries
        assert served_requests(fleet, 0) > 0


def json_or_sse(ctype: str) -> bool:
    return ctype.split(";")[0] in ("application/json", "text/event-stream")
