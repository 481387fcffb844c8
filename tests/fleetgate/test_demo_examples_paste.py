"""The examples `fleetgate demo` prints paste and run as printed: the block between its start and end
lines, taken from a running demo's output, runs in a clean `bash` (no venv on PATH, no variables
set beforehand) and every command in it does what its comment says."""

from __future__ import annotations

import json
import re
import shutil
import signal
import subprocess
import time
from pathlib import Path

import httpx
import pytest

from fleetgate.demo import EXAMPLES_END, EXAMPLES_START
from tests.fleetgate.demo_process import ENDPOINT_LINE, DemoProcess

pytestmark = [
    pytest.mark.timeout(180),
    pytest.mark.skipif(shutil.which("curl") is None or shutil.which("bash") is None, reason="needs curl"),
]

START_S = 90.0  # three simulator processes + gateways + router on a busy 2-core machine


def _printed_block(demo: DemoProcess) -> list[str]:
    demo.wait_for_line("^" + re.escape(EXAMPLES_START) + "$", START_S)
    block = [EXAMPLES_START]
    while block[-1] != EXAMPLES_END:
        block.append(demo.next_line(10))
    return block


def _wait_every_cluster_ready(url: str, admin_key: str, within_s: float = 60.0) -> None:
    """The demo prints once every pod reported ready; on a loaded machine a report may lag, and a
    user pastes seconds later: wait, on the router's own view, until every cluster is fresh."""
    deadline = time.monotonic() + within_s
    while True:
        doc = httpx.get(f"{url}/fleet", headers={"authorization": f"Bearer {admin_key}"}, timeout=10).json()
        if doc["clusters"] and all(
            c["fresh"] and all(m["ready_pods"] > 0 for m in c["models"].values()) and c["models"]
            for c in doc["clusters"]
        ):
            return
        assert time.monotonic() < deadline, doc
        time.sleep(0.2)


def _request_id_crosses_both_tiers(demo: DemoProcess, url: str) -> None:
    """`x-request-id: abc` through the demo's global endpoint comes back, and the access log the
    header names has that id on the router's line and the serving gateway's line."""
    api_key = next(ln.split()[2] for ln in demo.seen if ln.startswith("api key: "))
    log_path = Path(next(ln.split()[2] for ln in demo.seen if ln.startswith("access log: ")))
    rid = "abc-demo-request"
    r = httpx.post(
        f"{url}/v1/chat/completions",
        json={"model": "meta-llama/Llama-3.1-8B-Instruct", "messages": [{"role": "user", "content": "hi"}]},
        headers={"authorization": f"Bearer {api_key}", "x-request-id": rid},
        timeout=60,
    )
    assert r.status_code == 200, r.text
    assert r.headers["x-request-id"] == rid
    deadline = time.monotonic() + 10
    while True:
        lines = [json.loads(ln) for ln in log_path.read_text().splitlines() if rid in ln]
        targets = {str(ln.get("target", "")) for ln in lines if ln.get("request_id") == rid}
        # the router's line names the cluster, the serving gateway's the pod it chose
        clusters = {"us-east-1", "eu-west-1", "ap-south-1"}
        if targets & clusters and targets - clusters - {"-"}:
            return
        assert time.monotonic() < deadline, (targets, log_path.read_text()[-2000:])
        time.sleep(0.1)


def test_the_printed_examples_run_in_a_clean_shell(tmp_path: Path) -> None:
    demo = DemoProcess("--no-live", "--port", "0", "--duration", "150", tmp=tmp_path)
    try:
        first = demo.next_line(START_S)
        endpoint = ENDPOINT_LINE.match(first)
        assert endpoint, first
        block = _printed_block(demo)
        admin = next(ln.split()[2] for ln in demo.seen if ln.startswith("admin key: "))
        _wait_every_cluster_ready(endpoint.group(1), admin)
        script = "\n".join(block) + "\n"
        assert not re.search(r"^\s+EOF$", script, re.M), "an indented heredoc terminator does not paste"
        env = {"PATH": "/usr/bin:/bin", "HOME": str(tmp_path), "LANG": "C.UTF-8"}
        run = subprocess.run(
            ["bash", "-euo", "pipefail"],  # -u: every variable the block uses, the block sets
            input=script,
            capture_output=True,
            text=True,
            env=env,
            cwd=tmp_path,
            timeout=90,
        )
        assert run.returncode == 0, f"stdout:\n{run.stdout}\nstderr:\n{run.stderr}"
        out = run.stdout
        # 1. chat through the router: 200, and the serving cluster named in a header
        assert re.search(r"^HTTP/1\.1 200", out, re.M), out[:2000]
        assert re.search(r"^x-fleetgate-cluster: (us-east-1|eu-west-1|ap-south-1)\r?$", out, re.M | re.I)
        # 2. the Python SDK snippet printed a completion; 3. /fleet answered JSON with the admin key
        fleet = next(json.loads(ln) for ln in out.splitlines() if ln.startswith('{"router"'))
        assert {c["id"] for c in fleet["clusters"]} == {"us-east-1", "eu-west-1", "ap-south-1"}
        assert all(c.get("gateway_url") for c in fleet["clusters"])  # the admin view
        # 4. straight to a gateway: 401 in OpenAI's error shape
        assert re.search(r"^HTTP/1\.1 401", out, re.M)
        assert '"code":"invalid_api_key"' in out.replace(" ", "")
        # 5. the drain took
        assert out.rstrip().endswith('{"cluster_id":"us-east-1","router_drain":true}'), out[-500:]
        assert re.search(r"^reply: +\S", out, re.M), out  # the Python snippet's completion
        _request_id_crosses_both_tiers(demo, endpoint.group(1))
        assert demo.stop(signal.SIGTERM, 30) == 0
    finally:
        demo.kill_all()
