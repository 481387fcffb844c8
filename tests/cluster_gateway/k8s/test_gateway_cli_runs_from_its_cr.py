"""`fleetgate gateway --crd NS/NAME`: config read from the FleetgateGateway, status written back to it."""

from __future__ import annotations

import asyncio
import signal
import sys
from pathlib import Path

import yaml

from common.config.gateway import CRD_GROUP, CRD_KIND, CRD_PLURAL, CRD_VERSION
from tests.cluster_gateway.k8s.fake_apiserver import FakeApiServer, custom_collection
from tests.eventually import eventually

GATEWAYS = custom_collection(CRD_GROUP, CRD_VERSION, CRD_PLURAL)


def _kubeconfig(path: Path, server: str) -> Path:
    path.write_text(
        yaml.safe_dump(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "clusters": [{"name": "t", "cluster": {"server": server}}],
                "users": [{"name": "u", "user": {"token": "x"}}],
                "contexts": [{"name": "t", "context": {"cluster": "t", "user": "u"}}],
                "current-context": "t",
            }
        )
    )
    return path


async def test_gateway_reads_its_cr_and_reports_status(apiserver: FakeApiServer, tmp_path: Path) -> None:
    apiserver.put(
        GATEWAYS,
        {
            "apiVersion": f"{CRD_GROUP}/{CRD_VERSION}",
            "kind": CRD_KIND,
            "metadata": {"name": "gw", "namespace": "prod"},
            # a pod that refuses connections: discovered, never ready
            "spec": {"clusterId": "c1", "discovery": {"static": {"endpoints": ["http://127.0.0.1:9"]}}},
        },
    )
    kubeconfig = _kubeconfig(tmp_path / "kubeconfig", apiserver.url)
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "fleetgate", "gateway", "--crd", "prod/gw", "--kubeconfig", str(kubeconfig),
        "--port", "0", "--log-format", "text",
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT,
    )  # fmt: skip

    def status() -> dict[str, object]:
        obj = apiserver.get(GATEWAYS, "gw", "prod") or {}
        return obj.get("status") or {}

    try:
        await eventually(lambda: status().get("endpoints") == 1, 20.0, "status written by the gateway")
        assert status()["readyEndpoints"] == 0 and status()["stalePods"] == 1
        conditions = {c["type"]: c["status"] for c in status()["conditions"]}  # type: ignore[union-attr]
        assert conditions["EndpointsDiscovered"] == "True" and conditions["Ready"] == "False"
    finally:
        proc.send_signal(signal.SIGTERM)
        out, _ = await asyncio.wait_for(proc.communicate(), 20)
    assert proc.returncode == 0, out.decode()
    assert b"listening on http://127.0.0.1:" in out


async def test_crd_and_config_together_is_a_clear_error(tmp_path: Path) -> None:
    cfg = tmp_path / "g.yaml"
    cfg.write_text("discovery: {static: {endpoints: ['http://127.0.0.1:9']}}\n")
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "fleetgate", "gateway", "--crd", "prod/gw", "--config", str(cfg),
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip
    _, err = await asyncio.wait_for(proc.communicate(), 20)
    assert proc.returncode == 2
    assert b"--crd and --config" in err
