"""The peers' rows start each peer the way the row's title says (no peer needs to be installed)."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path
from typing import Any

import pytest

from bench import throughput as tp
from bench import throughput_fronts as fronts


class RecordingLauncher(fronts.Launcher):
    """Records each command instead of running it."""

    def __init__(self, workdir: Path) -> None:
        super().__init__(workdir)
        self.commands: list[list[str]] = []

    def start(
        self, tag: str, cmd: list[str], env: dict[str, str] | None = None
    ) -> tuple[subprocess.Popen[bytes], Path]:
        self.commands.append(cmd)
        return subprocess.Popen(["true"]), self.workdir / f"{tag}.log"


@pytest.fixture
def launcher(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> RecordingLauncher:
    (tmp_path / "litellm").touch()  # the peer's executable only has to exist
    monkeypatch.setattr(fronts, "PEERS_BIN", tmp_path)
    monkeypatch.setattr(fronts, "peer_version", lambda _dist: "1.0")
    monkeypatch.setattr(fronts, "_ready", lambda front, *_a, **_k: front)
    return RecordingLauncher(tmp_path)


def flag(cmd: list[str], name: str) -> Any:
    return cmd[cmd.index(name) + 1] if name in cmd else None


def test_litellm_runs_on_its_default_and_tuned_with_a_worker_per_core(launcher: RecordingLauncher) -> None:
    default = tp.STARTERS["litellm"](launcher, "http://127.0.0.1:1", 1)
    tuned = tp.STARTERS["litellm-tuned"](launcher, "http://127.0.0.1:1", 1)
    assert flag(launcher.commands[0], "--num_workers") is None
    assert flag(launcher.commands[1], "--num_workers") == str(os.cpu_count() or 1)
    assert (default.name, tuned.name) == (
        "LiteLLM proxy 1.0",
        f"LiteLLM proxy 1.0, --num_workers {os.cpu_count() or 1}",
    )
    for front in (default, tuned):  # LiteLLM needs its master key as the clients' bearer token
        assert front.headers["authorization"].startswith("Bearer sk-")


def test_every_row_has_a_title_and_a_starter_and_peer_rows_name_their_peer() -> None:
    assert set(tp.TITLES) == set(tp.ROWS)
    assert set(tp.STARTERS) == set(tp.ROWS) - {"direct"}
    assert set(tp.PEER_ROWS.values()) <= set(fronts.PEERS)
    assert tp.PEER_ROWS["litellm-tuned"] == "litellm"
