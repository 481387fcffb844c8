"""A kind cluster per cluster of the shared scenario topology, a gateway in each, one global router:
a request through the global endpoint, then the netns bed's scenarios that kind can run.

Needs kind, docker (with a daemon), helm and kubectl; skips with the missing piece named otherwise.
The scripts' syntax, and that they take their clusters and scenarios from the definitions the netns
bed uses (`fleetgate/netbed/scenarios.py`), are checked everywhere.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from fleetgate.netbed import kind, scenarios

KIND = Path(__file__).resolve().parents[2] / "deploy" / "kind"
SCRIPTS = ["up.sh", "smoke.sh", "scenarios.sh", "down.sh"]


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
    assert "fleetgate.netbed.scenarios kind-clusters" in lib and 'echo "fleetgate-$1"' in lib
    assert "region: ${REGION_OF[$cid]}" in up  # each gateway reports its cluster's shared region
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


def _sourced(expr: str) -> str:
    """`expr` echoed by bash after sourcing lib.sh (with this interpreter as its Python)."""
    env = {**os.environ, "FLEETGATE_KIND_PYTHON": sys.executable}
    done = subprocess.run(
        ["bash", "-c", f'source "{KIND / "lib.sh"}" && echo {expr}'],
        capture_output=True,
        text=True,
        timeout=60,
        env=env,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


def test_kind_clusters_and_regions_are_the_shared_topology() -> None:
    want = scenarios.KIND_TOPOLOGY.clusters
    assert _sourced('"${CLUSTERS[@]}"').split() == [c.cluster_id for c in want]
    for c in want:
        assert _sourced(f'"${{REGION_OF[{c.cluster_id}]}}"') == c.region
    assert _sourced('"$ROUTER_CLUSTER"') == kind.KindFleet(Path("."), "").router_cluster


def test_kind_runs_the_shared_scenarios_that_fit_it_and_names_what_the_others_need() -> None:
    listed = subprocess.run(
        [sys.executable, "-m", "fleetgate.netbed.kind", "--list"],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=KIND.parents[1],
    )
    assert listed.returncode == 0, listed.stderr
    rows = dict(line.split("\t") for line in listed.stdout.splitlines())
    assert list(rows) == [s.name for s in scenarios.SCENARIOS]  # the same list, in the same order
    runnable = {s.name for s in scenarios.SCENARIOS if s.needs <= scenarios.KIND_CAPABILITIES}
    assert {n for n, what in rows.items() if what == "run"} == runnable == set(kind.RUNNERS)
    assert all(what.startswith("skip: needs ") for n, what in rows.items() if n not in runnable)


def test_kind_fault_injection_drives_kubectl_and_docker(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    calls = tmp_path / "calls"
    for tool in ("kubectl", "docker"):  # stand-ins that record their command line
        fake = tmp_path / tool
        fake.write_text(f'#!/bin/sh\necho "{tool} $*" >> "{calls}"\n')
        fake.chmod(0o755)
    monkeypatch.setenv("PATH", f"{tmp_path}{os.pathsep}{os.environ['PATH']}")
    fleet = kind.KindFleet(tmp_path, "http://127.0.0.1:18000")
    fleet.rollout_restart("euw1", kind.GATEWAY_DEPLOY)
    fleet.kill_gateway("use1")
    ctx = "kubectl --context kind-fleetgate-{} -n fleetgate"
    assert calls.read_text().splitlines() == [
        f"{ctx.format('euw1')} rollout restart {kind.GATEWAY_DEPLOY}",
        f"{ctx.format('euw1')} rollout status {kind.GATEWAY_DEPLOY} --timeout 180s",
        "docker exec fleetgate-use1-control-plane pkill -KILL -f fleetgate gateway",
        f"{ctx.format('use1')} scale {kind.GATEWAY_DEPLOY} --replicas 0",
    ]


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
        ran = subprocess.run(
            [str(KIND / "scenarios.sh")],
            env={**env, "FLEETGATE_KIND_PYTHON": sys.executable},
            capture_output=True,
            text=True,
            timeout=900,
        )
        assert ran.returncode == 0, ran.stdout[-4000:] + ran.stderr[-4000:]
        assert ran.stdout.count("PASS ") == len(kind.RUNNERS)
    finally:
        subprocess.run([str(KIND / "down.sh")], env=env, capture_output=True, timeout=600)
