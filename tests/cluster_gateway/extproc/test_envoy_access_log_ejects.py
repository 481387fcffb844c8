"""END TO END with the real Envoy binary: a pod that fails fast is ejected in Envoy mode with the
default processing mode (response phase skipped), because Envoy's gRPC access log reports each
request's status to the picker; and the same holds for the ext_authz picker."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from cluster_gateway.envoy_front.bootstrap import envoy_bootstrap
from cluster_gateway.gateway import ClusterGateway
from modelsim.fleet import PodSpec, SimFleet
from tests.cluster_gateway.extproc.test_envoy_end_to_end import chat, envoy_process
from tests.cluster_gateway.integration.conftest import gateway_spec, served_requests, wait_ready
from tests.eventually import eventually

pytestmark = pytest.mark.envoy


@contextlib.asynccontextmanager
async def stack(tmp: Path, picker: str) -> AsyncIterator[tuple[SimFleet, ClusterGateway, httpx.AsyncClient]]:
    overrides: dict[str, Any] = (
        {"extAuthz": {"enabled": True}} if picker == "ext_authz" else {"extProc": {"enabled": True}}
    )
    async with SimFleet([PodSpec(profile="tiny") for _ in range(2)]) as fleet:
        gw = ClusterGateway(gateway_spec(fleet.urls, **overrides), port=0, extproc_port=0)
        await gw.start()
        try:
            await wait_ready(gw, 2)
            bootstrap = envoy_bootstrap(
                listen_port=0,
                extproc_port=gw.extproc_port,
                admin_port=0,
                picker="ext_authz" if picker == "ext_authz" else "ext_proc",
                check_port=gw.bound_port if picker == "ext_authz" else None,
            )
            async with (
                envoy_process(bootstrap, tmp) as envoy,
                httpx.AsyncClient(base_url=envoy.url, timeout=30) as c,
            ):
                yield fleet, gw, c
        finally:
            await gw.stop()


@pytest.mark.parametrize("picker", ["ext_proc", "ext_authz"])
async def test_a_pod_answering_500_at_once_is_ejected_and_traffic_moves_to_the_healthy_one(
    tmp_path: Path, picker: str
) -> None:
    async with stack(tmp_path, picker) as (fleet, gw, envoy):
        broken = gw.pool.get(fleet.urls[0])
        assert broken is not None
        fleet.set_fault(0, "error", status=500)
        for i in range(40):  # sequential: each pick sees the previous outcomes
            await envoy.post("/v1/chat/completions", json=chat(f"e{i}"))
            if broken.ejected_until > 0:
                break
        await eventually(lambda: broken.ejected_until > 0, within=5.0, what="the failing pod ejected")
        before = served_requests(fleet, 1)
        rs = [await envoy.post("/v1/chat/completions", json=chat(f"h{i}")) for i in range(10)]
        assert [r.status_code for r in rs] == [200] * 10, [r.text for r in rs]
        assert served_requests(fleet, 1) == before + 10
