"""Start-up errors name what they are about: a taken port (held bound here) gives one line with
HOST:PORT and a non-zero exit, in both tiers and the simulator; a missing file is named."""

from __future__ import annotations

import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from common.listen_error import ListenError
from global_router.tenants import hash_key

CMD = [sys.executable, "-m", "fleetgate"]


@pytest.fixture
def taken_port() -> Iterator[int]:
    """A port bound and listening for the whole test, so nothing else can bind it."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen()
        yield sock.getsockname()[1]


def _run(*argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*CMD, *argv], capture_output=True, text=True, timeout=90, stdin=subprocess.DEVNULL)


def _one_line_naming(out: subprocess.CompletedProcess[str], program: str, port: int) -> None:
    assert out.returncode == 1, out.stderr
    lines = [ln for ln in out.stderr.splitlines() if ln.startswith(f"fleetgate {program}:")]
    assert lines == [f"fleetgate {program}: cannot listen on 127.0.0.1:{port}: address already in use"], (
        out.stderr
    )
    assert "Traceback" not in out.stderr


def test_gateway_on_a_taken_port(taken_port: int) -> None:
    out = _run(
        "gateway", "--pods", "http://127.0.0.1:9", "--host", "127.0.0.1", "--port", str(taken_port),
        "--workers", "1",
    )  # fmt: skip
    _one_line_naming(out, "gateway", taken_port)


def test_global_router_on_a_taken_port(taken_port: int, tmp_path: Path) -> None:
    cfg = tmp_path / "router.yaml"
    cfg.write_text(f"host: 127.0.0.1\ntenants:\n  - name: a\n    apiKeySha256: [{hash_key('sk-x')}]\n")
    out = _run("global-router", "--config", str(cfg), "--port", str(taken_port), "--grpc-port", "0")
    _one_line_naming(out, "global-router", taken_port)


def test_grpc_ports_name_themselves_too(taken_port: int, tmp_path: Path) -> None:
    """gRPC says only "Failed to bind": the line still names the address and which server it was."""
    out = _run(
        "gateway", "--pods", "http://127.0.0.1:9", "--host", "127.0.0.1", "--port", "0",
        "--extproc-port", str(taken_port), "--workers", "1",
    )  # fmt: skip
    assert out.returncode == 1 and "Traceback" not in out.stderr, out.stderr
    assert out.stderr.strip().splitlines()[-1] == (
        f"fleetgate gateway: cannot listen on 127.0.0.1:{taken_port}: "
        "the ext_proc gRPC server could not bind it (port in use)"
    )
    cfg = tmp_path / "router.yaml"
    cfg.write_text(
        f"host: 127.0.0.1\ncapacity: {{host: 127.0.0.1}}\ntenants:\n  - name: a\n    apiKeySha256: [{hash_key('sk-x')}]\n"
    )
    out = _run("global-router", "--config", str(cfg), "--port", "0", "--grpc-port", str(taken_port))
    assert out.returncode == 1 and "Traceback" not in out.stderr, out.stderr
    assert out.stderr.strip().splitlines()[-1] == (
        f"fleetgate global-router: cannot listen on 127.0.0.1:{taken_port}: "
        "the capacity gRPC server could not bind it (port in use)"
    )


def test_sim_on_a_taken_port(taken_port: int) -> None:
    out = _run("sim", "--pods", "1", "--profile", "tiny", "--base-port", str(taken_port))
    _one_line_naming(out, "sim", taken_port)


@pytest.mark.parametrize(
    ("program", "flag"), [("gateway", "--config"), ("global-router", "--config"), ("sim", "--pod-spec")]
)
def test_a_missing_file_is_named(program: str, flag: str, tmp_path: Path) -> None:
    missing = tmp_path / "nope.yaml"
    out = _run(program, flag, str(missing))
    assert out.returncode == 2
    assert (
        out.stderr.strip()
        == f"fleetgate {program}: {missing}: cannot read config file: No such file or directory"
    )


def test_listen_error_keeps_errno_and_brackets_ipv6() -> None:
    err = ListenError("::1", 8080, OSError(98, "Address already in use"))
    assert isinstance(err, OSError) and err.errno == 98
    assert str(err) == "cannot listen on [::1]:8080: address already in use"
