"""The calibration proxies forward requests to a real backend over one kept-alive client connection
and answer exactly what the backend answers, so their paced figures measure a real proxy hop."""

from __future__ import annotations

import json
import socket
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from bench import throughput_fronts
from bench.row_cpu import FLOOR_ROWS, _start
from bench.throughput import LOCAL, chat_body


@pytest.fixture(scope="module")
def backend(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    launch = throughput_fronts.Launcher(tmp_path_factory.mktemp("backend"))
    try:
        cmd = [
            sys.executable, "-m", "bench.static_backend", "--host", LOCAL, "--port", "0",
            "--chunks", "3", "--interval-ms", "1",
        ]  # fmt: skip
        proc, log = launch.start("backend", cmd)
        port = throughput_fronts.wait_log(proc, log, r"static backend listening on http://127\.0\.0\.1:(\d+)")
        yield f"http://{LOCAL}:{port}"
    finally:
        launch.close()


def _two_requests_on_one_connection(port: int) -> list[tuple[bytes, dict[str, object]]]:
    body = json.dumps(chat_body()).encode()
    head = (
        f"POST /v1/chat/completions HTTP/1.1\r\nhost: {LOCAL}:{port}\r\ncontent-type: application/json\r\n"
        f"content-length: {len(body)}\r\n\r\n"
    ).encode()
    answers = []
    with socket.create_connection((LOCAL, port), timeout=10) as s:
        reader = s.makefile("rb")
        for _ in range(2):
            s.sendall(head + body)
            status = reader.readline()
            length = 0
            while (line := reader.readline()) not in (b"\r\n", b""):
                name, _, value = line.decode().partition(":")
                if name.strip().lower() == "content-length":
                    length = int(value)
            answers.append((status.split(b" ")[1], json.loads(reader.read(length))))
    return answers


@pytest.mark.parametrize("row", sorted(FLOOR_ROWS))
def test_floor_proxy_relays_the_backends_answers(row: str, backend: str, tmp_path: Path) -> None:
    launch = throughput_fronts.Launcher(tmp_path)
    try:
        front = _start(row, launch, backend)  # waits until a completion through it answered 200
        port = int(front.url.rsplit(":", 1)[1])
        direct = _two_requests_on_one_connection(int(backend.rsplit(":", 1)[1]))
        via = _two_requests_on_one_connection(port)
        assert [status for status, _ in via] == [b"200", b"200"]
        assert [a["choices"] for _, a in via] == [a["choices"] for _, a in direct]
    finally:
        launch.close()
