"""`fleetgate gateway` as a real process: bound-address log lines, clear config errors, clean SIGTERM."""

from __future__ import annotations

import re
import signal
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from modelsim.fleet import PodSpec, SimFleet
from tests.procs import fleetgate

from .conftest import chat


@pytest.fixture
def sim() -> Iterator[SimFleet]:
    fleet = SimFleet([PodSpec(profile="tiny"), PodSpec(profile="tiny")])
    fleet.start_in_thread()
    yield fleet
    fleet.stop_thread()


def test_bad_config_exits_2_naming_the_field(tmp_path: Path) -> None:
    cfg = tmp_path / "gw.yaml"
    cfg.write_text("discovery:\n  static:\n    endpoints: [http://127.0.0.1:9]\nproxy:\n  maxAttempts: 99\n")
    p = fleetgate("gateway", "--config", str(cfg))
    _out, err = p.communicate(timeout=30)
    assert p.returncode == 2
    assert "proxy.maxAttempts" in err
    missing = fleetgate("gateway", "--config", str(tmp_path / "nope.yaml"))
    _out, err = missing.communicate(timeout=30)
    assert missing.returncode == 2 and "cannot read config file" in err
    neither = fleetgate("gateway")
    _out, err = neither.communicate(timeout=30)
    assert neither.returncode == 2 and "--pods" in err


def test_serves_logs_addresses_and_stops_on_sigterm(sim: SimFleet) -> None:
    p = fleetgate("gateway", "--pods", ",".join(sim.urls), "--port", "0", "--extproc-port", "0")
    try:
        assert p.stderr is not None
        lines: list[str] = []
        http_port = grpc_port = None
        deadline = time.monotonic() + 30
        while (http_port is None or grpc_port is None) and time.monotonic() < deadline:
            line = p.stderr.readline()
            if not line:
                break
            lines.append(line)
            if m := re.search(r"listening on http://127\.0\.0\.1:(\d+)", line):
                http_port = int(m.group(1))
            if m := re.search(r"ext_proc endpoint picker listening on 127\.0\.0\.1:(\d+)", line):
                grpc_port = int(m.group(1))
        assert http_port and grpc_port, lines
        with httpx.Client(base_url=f"http://127.0.0.1:{http_port}", timeout=10) as c:
            for _ in range(200):
                if c.get("/ready").status_code == 200:
                    break
                time.sleep(0.05)
            r = c.post("/v1/chat/completions", json=chat("from the cli"))
            assert r.status_code == 200, r.text
        p.send_signal(signal.SIGTERM)
        assert p.wait(timeout=15) == 0
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
