"""Three kind clusters, a gateway in each, one global router: a request through the global endpoint.

Needs kind, docker (with a daemon), helm and kubectl; skips with the missing piece named otherwise.
The scripts' syntax is checked everywhere.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

KIND = Path(__file__).resolve().parents[2] / "deploy" / "kind"
SCRIPTS = ["up.sh", "smoke.sh", "down.sh"]


@pytest.mark.parametrize("script", [*SCRIPTS, "lib.sh"])
def test_script_is_valid_bash(script: str) -> None:
    path = KIND / script
    assert subprocess.run(["bash", "-n", str(path)], capture_output=True, timeout=30).returncode == 0
    if script != "lib.sh":
        assert os.access(path, os.X_OK), f"{script} is not executable"
        assert path.read_text().startswith("#!/usr/bin/env bash\n")


def test_up_creates_the_three_regions_and_wires_agents() -> None:
    lib = (KIND / "lib.sh").read_text()
    up = (KIND / "up.sh").read_text()
    assert "us eu ap" in lib and 'echo "fleetgate-$1"' in lib
    assert "load_image" in up and "build_image" in up and "kind load docker-image" not in up + lib
    assert "kind load image-archive" in lib and "docker build" in lib
    assert "fleetgate-global-router" in up and "fleetgate-cluster-gateway" in up
    assert 'args: [sim, --pods, "1", --base-port, "8000"' in up
    assert "inference.networking.k8s.io/engine-type: vllm" in up
    assert "tokenSha256" in up and "existingSecret: fleetgate-agent-token" in up
    # trust boundaries: gateway auth on, pinned gateway URLs, TLS on the capacity port, private /fleet
    assert "gatewayAuth: {existingSecret: fleetgate-gateway-auth" in up and "gatewayUrls" in up
    assert "capacityTls: {enabled: true" in up and "tls: true" in up and "adminKeySha256" in up
    smoke = (KIND / "smoke.sh").read_text()
    assert '[ "$code" = 401 ]' in smoke


def _missing() -> str | None:
    missing = [tool for tool in ("kind", "docker", "helm", "kubectl") if shutil.which(tool) is None]
    if missing:
        return f"missing {', '.join(missing)}"
    if subprocess.run(["docker", "info"], capture_output=True, timeout=20).returncode != 0:
        return "the Docker daemon is not reachable"
    return None


@pytest.mark.kind
@pytest.mark.timeout(1800)
def test_request_through_the_global_endpoint_reaches_a_cluster(tmp_path: Path) -> None:
    reason = _missing()
    if reason:
        pytest.skip(f"kind multi-cluster test needs kind, docker, helm and kubectl: {reason}")
    env = {**os.environ, "FLEETGATE_KIND_STATE": str(tmp_path / "state")}
    try:
        up = subprocess.run([str(KIND / "up.sh")], env=env, capture_output=True, text=True, timeout=1200)
        assert up.returncode == 0, up.stderr[-4000:]
        assert "global endpoint: http://127.0.0.1:" in up.stdout
        smoke = subprocess.run([str(KIND / "smoke.sh")], env=env, capture_output=True, text=True, timeout=120)
        assert smoke.returncode == 0, smoke.stderr[-4000:]
        assert '"choices"' in smoke.stdout
    finally:
        subprocess.run([str(KIND / "down.sh")], env=env, capture_output=True, timeout=600)
