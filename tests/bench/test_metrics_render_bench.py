"""`python -m bench.metrics_render` on a small pool: pruning leaves one pool's worth of series."""

from __future__ import annotations

import sys

import pytest

from bench import metrics_render


async def test_small_run_prints_a_table_where_pruning_keeps_one_pool(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(sys, "argv", ["metrics_render", "--pods", "20", "--rollouts", "3"])
    await metrics_render.main()
    rows = {
        line.split("|")[1].strip(): line.split("|")[2:]
        for line in capsys.readouterr().out.splitlines()
        if line.startswith("| b") or line.startswith("| a")
    }
    before, after = int(rows["before"][0]), int(rows["after"][0])
    assert before > 3 * after  # four pools' worth of series before, one after
