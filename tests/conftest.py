"""Shared fixtures: a real redis-server on loopback (launched by tests/procs.py)."""

from __future__ import annotations

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
