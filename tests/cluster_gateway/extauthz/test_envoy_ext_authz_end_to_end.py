"""END TO END with the real Envoy binary and its ext_authz filter: Envoy asks the gateway's HTTP port
for the pod (one keep-alive HTTP check per request), routes on the answer, and reports each
request's end through its gRPC access log, which releases the pod's slot.

client → Envoy listener → ext_authz filter ⇄ gateway HTTP port (`/_fleetgate/pick/...`)
       → ORIGINAL_DST cluster on `x-gateway-destination-endpoint` → modelsim pods
       ⤷ access log (gRPC, batched) → gateway's ext_proc port → slot released
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import socket
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from cluster_gateway.envoy_front.bootstrap import envoy_bootstrap
from cluster_gateway.gateway import ClusterGateway
from modelsim.fleet import PodSpec, SimFleet
from tests.cluster_gateway.extproc.test_envoy_end_to_end import chat, envoy_process, picked_ok, until_released
from tests.cluster_gateway.integration.conftest import (
    freeze_scrapes,
    gateway_spec,
    served_requests,
    wait_ready,
)
from tests.eventually import eventually

pytestmark = pytest.mark.envoy

TOKEN = "envoy-check-token"


@contextlib.asynccontextmanager
async def stack(
    specs: list[PodSpec], tmp: Path, *, workers: int = 1, **overrides: Any
) -> AsyncIterator[tuple[SimFleet, ClusterGateway, httpx.AsyncClient]]:
    digest = hashlib.sha256(TOKEN.encode()).hexdigest()
    async with SimFleet(specs) as fleet:
        spec = gateway_spec(
            fleet.urls, extAuthz={"enabled": True}, extProc={"envoyTokenSha256": [digest]}, **overrides
        )
        gw = ClusterGateway(spec, port=0, extproc_port=0, workers=workers)
        await gw.start()
        try:
            await wait_ready(gw, len(specs))
            bootstrap = envoy_bootstrap(
                listen_port=0,
                extproc_port=gw.extproc_port,
                admin_port=0,
                picker="ext_authz",
                check_port=gw.bound_port,
                envoy_token=TOKEN,
            )
            async with (
                envoy_process(bootstrap, tmp) as envoy,
                httpx.AsyncClient(base_url=envoy.url, timeout=30) as client,
            ):
                yield fleet, gw, client
        finally:
            await gw.stop()


async def test_requests_land_on_the_picked_pods_and_errors_are_openai_json(tmp_path: Path) -> None:
    async with stack([PodSpec(profile="tiny") for _ in range(3)], tmp_path) as (fleet, gw, envoy):
        spoof = {"x-gateway-destination-endpoint": "127.0.0.1:1", "x-fleetgate-pick": "0.1"}
        rs = await asyncio.gather(
            *(envoy.post("/v1/chat/completions", json=chat(f"r{i}"), headers=spoof) for i in range(12))
        )
        assert [r.status_code for r in rs] == [200] * 12, [r.text for r in rs if r.status_code != 200]
        await until_released(gw)  # every end came back through Envoy's access log
        async with httpx.AsyncClient() as plain:
            picks = picked_ok((await plain.get(f"{gw.url}/metrics")).text)
        landed = {url: float(n) for i, url in enumerate(fleet.urls) if (n := served_requests(fleet, i))}
        assert picks == landed and sum(landed.values()) == 12

        r = await envoy.post("/v1/chat/completions", json=chat("x") | {"model": "nope"})
        assert r.status_code == 404 and r.json()["error"]["code"] == "model_not_found"
        r = await envoy.post(
            "/v1/chat/completions", content=b"{oops", headers={"content-type": "application/json"}
        )
        assert r.status_code == 400 and r.json()["error"]["code"] == "invalid_json"
        r = await envoy.get("/v1/other")
        assert r.status_code == 404 and r.json()["error"]["message"] == "Unknown path /v1/other"
        models = (await envoy.get("/v1/models")).json()
        assert [m["id"] for m in models["data"]] == [chat("")["model"]]
        # the gateway's own port refuses a check that does not come from its Envoy
        async with httpx.AsyncClient(base_url=gw.url) as direct:
            r = await direct.post("/_fleetgate/pick/v1/chat/completions", json=chat("y"))
        assert r.status_code == 403 and r.json()["error"]["code"] == "forbidden"
        assert all(p.inflight == 0 for p in gw.pool.pods())


async def test_a_stream_holds_its_pod_until_the_access_log_reports_its_end(tmp_path: Path) -> None:
    async with stack([PodSpec(profile="tiny", time_scale=4.0)], tmp_path) as (fleet, gw, envoy):
        pod = gw.pool.get(fleet.urls[0])
        assert pod is not None
        seen = []
        async with envoy.stream(
            "POST", "/v1/chat/completions", json=chat("s", max_tokens=24, stream=True)
        ) as r:
            assert r.status_code == 200
            async for line in r.aiter_lines():
                if line.startswith("data: "):
                    seen.append(pod.inflight)
        assert len(seen) >= 20 and seen[-2] == 1  # counted while tokens flow
        await until_released(gw)


async def test_a_denied_request_naming_an_open_pick_releases_nothing(tmp_path: Path) -> None:
    """Envoy logs a request it answers itself (a denied check) with the client's own
    `x-fleetgate-pick`. Naming an open pick by its worker and sequence number, the one part of an id
    a client could guess, must not release that pick's slot."""
    async with stack([PodSpec(profile="tiny", time_scale=4.0)], tmp_path) as (fleet, gw, envoy):
        pod = gw.pool.get(fleet.urls[0])
        assert pod is not None and gw.data.check is not None
        ledger = gw.data.check.ledger
        async with envoy.stream(
            "POST", "/v1/chat/completions", json=chat("s", max_tokens=400, stream=True)
        ) as r:
            assert r.status_code == 200
            (held,) = list(ledger)
            guess = held.rsplit(".", 1)[0]
            for forged in (guess, f"{guess}.{'0' * 16}"):
                denied = await envoy.post(
                    "/v1/chat/completions",
                    json=chat("x") | {"model": "nope"},
                    headers={"x-fleetgate-pick": forged},
                )
                assert denied.status_code == 404
            # one Envoy worker logs in order: once this request's end is applied, so are the denials'
            assert (await envoy.post("/v1/chat/completions", json=chat("marker"))).status_code == 200
            await eventually(lambda: list(ledger) == [held], within=4.0, what="the marker's pick released")
            assert pod.inflight == 1  # the stream still holds its slot
        await until_released(gw)


async def test_picks_made_by_any_worker_are_released_whichever_process_gets_the_log(tmp_path: Path) -> None:
    async with stack([PodSpec(profile="tiny") for _ in range(2)], tmp_path, workers=2) as (_fleet, gw, envoy):
        for round_ in range(3):
            rs = await asyncio.gather(
                *(envoy.post("/v1/chat/completions", json=chat(f"{round_}-{i}")) for i in range(24))
            )
            assert [r.status_code for r in rs] == [200] * 24
        await until_released(gw)


async def test_override_host_mode_fails_over_to_the_checks_ranked_fallbacks(tmp_path: Path) -> None:
    """STATIC pod cluster + override_host LB: the picked pod is dead, Envoy retries the ranked list
    the check returned (`x-fleetgate-endpoints`, as ext_authz dynamic metadata)."""
    specs = [PodSpec(profile="tiny") for _ in range(3)]
    slow = {"intervalMs": 60000, "maxStalenessMs": 120000}  # the pool keeps believing pod 0 is fine
    async with SimFleet(specs) as fleet:
        gw = ClusterGateway(
            gateway_spec(fleet.urls, extAuthz={"enabled": True}, scrape=slow), port=0, extproc_port=0
        )
        await gw.start()
        try:
            await wait_ready(gw, len(specs))
            freeze_scrapes(gw)  # the pool keeps believing pod 0 is fine
            pods = [(p.endpoint.address, p.endpoint.port) for p in gw.pool.pods()]
            bootstrap = envoy_bootstrap(
                listen_port=0,
                extproc_port=gw.extproc_port,
                admin_port=0,
                pods=pods,
                picker="ext_authz",
                check_port=gw.bound_port,
            )
            async with (
                envoy_process(bootstrap, tmp_path) as proc,
                httpx.AsyncClient(base_url=proc.url, timeout=30) as envoy,
            ):
                rs = [await envoy.post("/v1/chat/completions", json=chat(f"w{i}")) for i in range(6)]
                assert [r.status_code for r in rs] == [200] * 6, [r.text for r in rs]
                for other in fleet.urls[1:]:  # make pod 0 the first choice ...
                    for _ in range(20):
                        gw.pool.acquire(other)
                fleet.set_fault(0, "crash")  # ... and kill it
                before = served_requests(fleet, 1) + served_requests(fleet, 2)
                rs = [await envoy.post("/v1/chat/completions", json=chat(f"f{i}")) for i in range(6)]
                assert [r.status_code for r in rs] == [200] * 6, [r.text for r in rs]
                assert served_requests(fleet, 1) + served_requests(fleet, 2) == before + 6
                async with httpx.AsyncClient() as plain:
                    stats = (await plain.get(f"http://127.0.0.1:{proc.admin}/stats")).text
                retried = [
                    ln
                    for ln in stats.splitlines()
                    if ln.startswith("cluster.model-servers.upstream_rq_retry_success:")
                ]
                state = [
                    (p.consecutive_failures, p.inflight, p.dispatched_since_scrape) for p in gw.pool.pods()
                ]
                # at least the first one failed over
                assert retried and int(retried[0].split()[-1]) >= 1, state
        finally:
            await gw.stop()


async def test_an_unreachable_check_is_a_503_in_openai_json(tmp_path: Path) -> None:
    """The gateway's HTTP port is down (a bound socket that never listens: refused): Envoy's own
    503 for the failed check is JSON too, not an empty body."""
    closed = socket.socket()
    closed.bind(("127.0.0.1", 0))
    try:
        bootstrap = envoy_bootstrap(
            listen_port=0,
            extproc_port=closed.getsockname()[1],
            admin_port=0,
            picker="ext_authz",
            check_port=closed.getsockname()[1],
        )
        async with (
            envoy_process(bootstrap, tmp_path) as envoy,
            httpx.AsyncClient(base_url=envoy.url, timeout=30) as client,
        ):
            r = await client.post("/v1/chat/completions", json=chat("hi"))
    finally:
        closed.close()
    assert r.status_code == 503 and r.headers["content-type"] == "application/json", (r.headers, r.text)
    err = r.json()["error"]
    assert err["type"] == "server_error" and err["code"] == "picker_unavailable" and err["message"]
