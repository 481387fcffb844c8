"""What the charts render is what the servers run: the gateway's ConfigMap and the router's assembled
config start the real `fleetgate` processes (bound to loopback) and answer /health."""

from __future__ import annotations

import hashlib
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx
import yaml

from tests.deploy.charts import GATEWAY_CHART, ROOT, ROUTER_CHART, one, render

FLEETGATE = str(Path(sys.executable).with_name("fleetgate"))
URL = re.compile(r"listening on (http://127\.0\.0\.1:\d+)")


def _serve_until_healthy(args: list[str]) -> None:
    proc = subprocess.Popen(
        [FLEETGATE, *args, "--host", "127.0.0.1", "--port", "0", "--log-format", "text"],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        assert proc.stdout is not None
        deadline = time.monotonic() + 30
        url = None
        seen = []
        while url is None and time.monotonic() < deadline:
            line = proc.stdout.readline()
            if not line:
                break
            seen.append(line)
            m = URL.search(line)
            url = m.group(1) if m else None
        assert url, "no 'listening on' line:\n" + "".join(seen)
        assert httpx.get(f"{url}/health", timeout=10).status_code == 200
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.communicate(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.communicate()
    assert proc.returncode == 0


def test_gateway_runs_the_config_the_chart_renders(tmp_path: Path) -> None:
    values = {
        "gateway": {
            "discovery": {"static": {"endpoints": ["http://127.0.0.1:9"]}},
            "extProc": {"enabled": False},
        }
    }
    config = tmp_path / "gateway.yaml"
    config.write_text(one(render(GATEWAY_CHART, values), "ConfigMap")["data"]["gateway.yaml"])
    _serve_until_healthy(["gateway", "--config", str(config)])


def test_router_runs_the_config_its_init_container_assembles(tmp_path: Path) -> None:
    values = {
        "agents": [
            {
                "clusterId": "c1",
                "tokenSha256": hashlib.sha256(b"t").hexdigest(),
                "gatewayHosts": ["gw.c1.internal"],
            }
        ],
        "capacityTls": {
            "enabled": False
        },  # no certificate on this machine (tests/deploy checks the TLS render)
        "tenants": [{"name": "a", "apiKeySha256": [hashlib.sha256(b"k").hexdigest()]}],
    }
    docs = render(ROUTER_CHART, values)
    cm = one(docs, "ConfigMap")["data"]
    etc = tmp_path / "etc"
    (etc / "base").mkdir(parents=True)
    (etc / "base" / "router.yaml").write_text(cm["router.yaml"])
    for d in docs:
        if d["kind"] == "Secret":
            for key, text in d["stringData"].items():
                (etc / key.removesuffix(".yaml")).mkdir(exist_ok=True)
                (etc / key.removesuffix(".yaml") / key).write_text(text)
    out = tmp_path / "router.yaml"
    env = {
        **os.environ,
        "FLEETGATE_CONFIG_DIR": str(etc),
        "FLEETGATE_CONFIG_OUT": str(out),
        "PYTHONPATH": str(ROOT),
    }
    env.pop("FLEETGATE_REDIS_URL", None)
    script = tmp_path / "assemble.py"
    script.write_text(cm["assemble.py"])
    subprocess.run([sys.executable, str(script)], env=env, check=True, capture_output=True, timeout=60)
    assert yaml.safe_load(out.read_text())["capacity"]["agents"][0]["clusterId"] == "c1"
    _serve_until_healthy(["global-router", "--config", str(out), "--grpc-port", "0"])
