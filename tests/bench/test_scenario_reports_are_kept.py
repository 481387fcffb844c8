"""`fleetgate bench X` leaves X's markdown table under bench/results/, and a failed run keeps the old one."""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest

from bench import cli, report


def test_printed_table_is_written_under_its_header(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with report.tee_to_results("demo", "# demo\n- command: `x`", tmp_path) as path:
        print("| a | b |")
    assert "| a | b |" in capsys.readouterr().out
    assert path.read_text() == "# demo\n- command: `x`\n\n| a | b |\n"


def test_failed_run_leaves_the_previous_report(tmp_path: Path) -> None:
    (tmp_path / "demo.md").write_text("old figures\n")
    with pytest.raises(RuntimeError), report.tee_to_results("demo", "# demo", tmp_path):
        print("half a table")
        raise RuntimeError("scenario crashed")
    assert (tmp_path / "demo.md").read_text() == "old figures\n"


def test_cli_keeps_a_simulated_time_scenarios_table(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(report, "RESULTS_DIR", tmp_path)
    args = argparse.Namespace(
        scenario="pick-sim", quick=False, rest=["--seconds", "3", "--rate", "20", "--profiles", "latency"]
    )
    assert cli.run(args) == 0
    text = (tmp_path / "pick_sim.md").read_text()
    assert "fleetgate bench pick-sim --seconds 3" in text
    assert "| latency |" in text


def test_quick_runs_get_their_own_report_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(report, "RESULTS_DIR", tmp_path)
    assert report.output_path(None, "global", quick=True) == tmp_path / "global_quick.md"
    assert report.output_path(None, "global", quick=False) == tmp_path / "global.md"
    chosen = tmp_path / "elsewhere" / "x.md"
    assert report.output_path(chosen, "global", quick=True) == chosen and chosen.parent.is_dir()


def test_written_report_carries_command_and_table(tmp_path: Path) -> None:
    path = tmp_path / "overhead.md"
    report.write_results(path, "overhead", ["python", "-m", "bench.proxy_overhead", "--quick"], "| a |")
    text = path.read_text()
    assert text.startswith("# overhead\n") and "`python -m bench.proxy_overhead --quick`" in text
    assert text.endswith("| a |\n") and not path.with_suffix(".md.tmp").exists()
