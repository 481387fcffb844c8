"""`fleetgate global-router --workers N`: N processes serve one port over one shared fleet view."""

from __future__ import annotations

import argparse
import os
import threading
from pathlib import Path

import httpx
import msgspec

from global_router.cli import _workers
from tests.global_router.integration.fleet_harness import ADMIN_HEADERS, router_config
from tests.procs import RedisServer, fleetgate, read_until, stop


def _write(cfg: object, path: Path) -> str:
    path.write_bytes(msgspec.json.encode(cfg))  # JSON is YAML
    return str(path)


def _drain(stream: object, into: list[str]) -> None:
    """Keep the child's pipe from filling once we stop reading; its lines go to `into`."""
    threading.Thread(target=lambda: into.extend(stream), daemon=True).start()  # type: ignore[call-overload]


def test_two_workers_serve_the_same_port_over_the_redis_fleet_view(
    tmp_path: Path, redis_server: RedisServer
) -> None:
    # A short drain, so that the stop below is bounded well inside its wait: notice + drain timeout
    # (workers and the main process drain together) + Redis calls at their 3 s timeout on a loaded host.
    server = {"drainNoticeS": 0.5, "drainTimeoutS": 5}
    cfg = _write(router_config(["a"], redis_url=redis_server.url, server=server), tmp_path / "router.json")
    proc = fleetgate(
        "global-router", "--config", cfg, "--port", "0", "--grpc-port", "0", "--workers", "2",
        "--log-format", "text",
    )  # fmt: skip
    logged: list[str] = []
    try:
        m, _ = read_until(proc.stderr, r"global router listening on (http://\S+)")
        url = m.group(1)
        read_until(proc.stderr, r"router worker 1 \(pid \d+\) serving on port")
        _drain(proc.stderr, logged)
        replicas: set[str] = set()
        for _ in range(200):  # a new connection each time: the kernel spreads them over both
            with httpx.Client(timeout=10) as client:
                r = client.get(f"{url}/fleet", headers=ADMIN_HEADERS)
            assert r.status_code == 200, r.text
            replicas.add(r.json()["router"]["replica"])
            if len(replicas) == 2:
                break
        assert len(replicas) == 2, replicas
    finally:
        code = stop(proc, timeout_s=30.0)
        assert code == 0, f"exit {code}; the router's last lines:\n{''.join(logged[-40:])}"


def test_more_than_one_worker_without_redis_is_refused(tmp_path: Path) -> None:
    cfg = _write(router_config(["a"]), tmp_path / "router.json")
    proc = fleetgate("global-router", "--config", cfg, "--port", "0", "--grpc-port", "0", "--workers", "2")
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 2, err
    assert "configure `redis`" in err


def test_auto_is_one_per_core_with_redis_and_one_without() -> None:
    auto = argparse.Namespace(workers="auto")
    assert _workers(router_config(["a"]), auto) == 1
    assert _workers(router_config(["a"], redis_url="redis://127.0.0.1:1/0"), auto) == (os.cpu_count() or 1)
    assert _workers(router_config(["a"]), argparse.Namespace(workers="3")) == 3  # refused later, by name
