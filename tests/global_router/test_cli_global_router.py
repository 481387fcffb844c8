"""`fleetgate global-router` as a real process: hash a key, refuse bad config, serve, stop on SIGTERM."""

from __future__ import annotations

import json
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx

from global_router.tenants import hash_key

CMD = [sys.executable, "-m", "fleetgate", "global-router"]


def test_hash_key_prints_the_config_digest() -> None:
    out = subprocess.run([*CMD, "--hash-key", "sk-abc"], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0 and out.stdout.strip() == hash_key("sk-abc")
    out = subprocess.run(
        [*CMD, "--hash-key", "-"], input="sk-abc\n", capture_output=True, text=True, timeout=60
    )
    assert out.stdout.strip() == hash_key("sk-abc")


def test_bad_config_exits_2_naming_the_field(tmp_path: Path) -> None:
    cfg = tmp_path / "router.yaml"
    cfg.write_text("tenants:\n  - name: a\n    apiKeySha256: [nothex]\n")
    out = subprocess.run([*CMD, "--config", str(cfg)], capture_output=True, text=True, timeout=60)
    assert out.returncode == 2
    assert "tenants[0].apiKeySha256[0]" in out.stderr
    out = subprocess.run(
        [*CMD, "--config", str(tmp_path / "missing.yaml")], capture_output=True, text=True, timeout=60
    )
    assert out.returncode == 2 and "cannot read config file" in out.stderr
    cfg.write_text("redis:\n  url: notaurl\n")
    out = subprocess.run([*CMD, "--config", str(cfg)], capture_output=True, text=True, timeout=60)
    assert out.returncode == 2 and "redis.url" in out.stderr


def test_serves_logs_bound_addresses_and_stops_on_sigterm(tmp_path: Path) -> None:
    cfg = tmp_path / "router.yaml"
    cfg.write_text(
        f"allowAnonymous: true\nadminKeySha256: {hash_key('adm')}\n"
        f"tenants:\n  - name: a\n    apiKeySha256: [{hash_key('sk-x')}]\n"
    )
    proc = subprocess.Popen(
        [*CMD, "--config", str(cfg), "--port", "0", "--grpc-port", "0", "--log-format", "text"],
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stderr is not None
        url = None
        grpc_line = None
        deadline = time.monotonic() + 30
        while (url is None or grpc_line is None) and time.monotonic() < deadline:
            line = proc.stderr.readline()
            if not line:
                break
            m = re.search(r"global router listening on (http://127\.0\.0\.1:\d+)", line)
            if m:
                url = m.group(1)
            if "capacity server listening on" in line:
                grpc_line = line
        assert url is not None and grpc_line is not None
        health = httpx.get(f"{url}/health", timeout=5).json()
        assert health["status"] == "ok" and health["rate_limiter"] == "local"
        assert httpx.get(f"{url}/fleet", timeout=5).status_code == 401  # private by default
        fleet = httpx.get(f"{url}/fleet", headers={"authorization": "Bearer adm"}, timeout=5).json()
        assert fleet["clusters"] == [] and json.dumps(fleet)
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=20) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
