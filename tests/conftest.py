"""Shared fixtures: a real redis-server on loopback (launched by tests/procs.py), a self-signed TLS
certificate (openssl) for the TLS listeners of both tiers."""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests import procs
from tests.procs import RedisServer

__all__ = ["RedisServer", "start_redis"]


def start_redis(tmp: Path, port: int | None = None) -> RedisServer:
    """Start redis-server on loopback (on `port`, e.g. to restart one a test killed); skip without it."""
    try:
        return procs.start_redis(tmp, port)
    except FileNotFoundError:
        pytest.skip("redis-server not installed (make test installs it)")


@pytest.fixture
def redis_server(tmp_path: Path) -> Iterator[RedisServer]:
    srv = start_redis(tmp_path)
    yield srv
    srv.stop()


@pytest.fixture
def tls_cert(tmp_path: Path) -> tuple[str, str]:
    """(cert file, key file): a self-signed certificate for 127.0.0.1 and localhost, valid one day."""
    openssl = shutil.which("openssl")
    if openssl is None:
        pytest.skip("openssl not installed")
    key, crt = tmp_path / "key.pem", tmp_path / "cert.pem"
    subprocess.run(
        [openssl, "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1", "-subj", "/CN=localhost",
         "-addext", "subjectAltName=IP:127.0.0.1,DNS:localhost", "-keyout", str(key), "-out", str(crt)],
        check=True,
        capture_output=True,
        timeout=60,
    )  # fmt: skip
    return str(crt), str(key)
