"""The calibration proxies forward requests to a real backend over one kept-alive client connection
and answer exactly what the backend answers, so their paced figures measure a real proxy hop."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from bench import throughput_fronts
from bench.row_cpu import FLOOR_ROWS, _start
from bench.throughput import chat_body


@pytest.fixture(scope="module")
def backend(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    launch = throughput_fronts.Launcher(tmp_path_factory.mktemp("backend"))
    try:
        yield throughput_fronts.static_backend(launch, chunks=3, interval_ms=1).url
    finally:
        launch.close()


def _two_requests_on_one_connection(url: str) -> list[httpx.Response]:
    limits = httpx.Limits(max_connections=1, max_keepalive_connections=1)
    with httpx.Client(base_url=url, limits=limits, timeout=10) as client:
        return [client.post("/v1/chat/completions", json=chat_body()) for _ in range(2)]


@pytest.mark.parametrize("row", sorted(FLOOR_ROWS))
def test_floor_proxy_relays_the_backends_answers(row: str, backend: str, tmp_path: Path) -> None:
    launch = throughput_fronts.Launcher(tmp_path)
    try:
        front = _start(row, launch, backend, 1)  # waits until a completion through it answered 200
        direct = _two_requests_on_one_connection(backend)
        via = _two_requests_on_one_connection(front.url)
        assert [r.status_code for r in via] == [200, 200]
        assert [r.json()["choices"] for r in via] == [r.json()["choices"] for r in direct]
    finally:
        launch.close()
