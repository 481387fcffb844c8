"""The fault bench's report: both ejection settings per fault, capped times shown as such."""

from __future__ import annotations

import argparse

from bench import cli
from bench.faults_bench import ROWS, RowResult, format_table


def test_fault_matrix_rows_pair_ejection_on_and_off() -> None:
    args = argparse.Namespace(duration=9.0, fault_at=1.0, clear_at=4.0)
    results = [
        RowResult("2 of 3 pods answer 503", True, 200, 199, 1, 1, 0, 0.25, 0.4, None),
        RowResult("2 of 3 pods answer 503", False, 180, 100, 80, 0, 2, 0.9, None, 0.3),
    ]
    lines = format_table(results, args).splitlines()
    assert lines[0].startswith("| fault | ejection | sent | succeeded | failed (mid-stream) | success %")
    on, off = lines[2], lines[3]
    assert on.split(" | ")[1:6] == ["on", "200", "199", "1 (1)", "99.50"]
    assert "0.40 s" in on and "> 5 s" in on  # recovery not seen within the 5 s after clearing
    assert off.split(" | ")[1] == "off" and "> 3 s" in off  # never ejected in the 3 s fault window


def test_the_matrix_covers_every_fault_of_the_issue_and_is_registered() -> None:
    names = " / ".join(r.name for r in ROWS)
    for fault in (
        "1 of 3 pods answer 503",
        "2 of 3 pods answer 500",
        "2 of 3 pods answer 429",
        "hung",
        "slow",
        "killed with queued streams",
        "frozen metrics",
        "flapping",
    ):
        assert fault in names
    sc = cli.SCENARIOS["faults"]
    assert sc.module == "bench.faults_bench" and sc.own_report
