"""The global endpoint takes the preferred port when free and any free port when it is taken;
an explicit --port that is taken is an error naming it."""

from __future__ import annotations

import argparse
import socket
from pathlib import Path

import pytest

from common.config.loader import ConfigError
from fleetgate import demo
from tests.procs import free_port


def _demo(tmp: Path, *argv: str) -> demo.Demo:
    parser = argparse.ArgumentParser()
    demo.add_arguments(parser)
    d = demo.Demo(parser.parse_args(list(argv)), out=None, events=None)  # type: ignore[arg-type]
    d.workdir = tmp
    d.keys.write_files(tmp)  # the router reads each cluster's gateway secret at start
    return d


async def test_preferred_port_is_used_when_free(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    port = free_port()
    monkeypatch.setattr(demo, "PREFERRED_PORT", port)
    router = await _demo(tmp_path)._start_router()
    try:
        assert router.http_port == port
    finally:
        await router.stop()


async def test_a_taken_preferred_port_falls_back_to_a_free_one(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        taken = busy.getsockname()[1]
        monkeypatch.setattr(demo, "PREFERRED_PORT", taken)
        router = await _demo(tmp_path)._start_router()
        try:
            assert router.http_port not in (0, taken)
        finally:
            await router.stop()


async def test_a_taken_explicit_port_is_an_error_naming_it(tmp_path: Path) -> None:
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        taken = busy.getsockname()[1]
        with pytest.raises(ConfigError, match=f"--port {taken}: .*cannot listen"):
            await _demo(tmp_path, "--port", str(taken))._start_router()
