"""The plot helpers: the failover binning is exact, and each drawing writes a real PNG."""

from __future__ import annotations

from pathlib import Path

import pytest

from bench import global_bench, plots, report

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def test_per_second_bins_count_every_request_once() -> None:
    t0 = 100.0
    results = [
        (100.1, 100.2, 200, "a"),
        (100.9, 101.5, 200, "b"),
        (101.2, 101.3, 502, "-"),
        (103.7, 104.0, 200, "b"),
        (103.8, 104.0, 0, "-"),
    ]
    bins = plots.per_second(results, t0)
    assert [b.second for b in bins] == [0, 1, 2, 3]  # the empty second is kept as a gap
    assert [(b.ok, b.failed) for b in bins] == [(2, 0), (0, 1), (0, 0), (1, 1)]
    assert bins[0].by_cluster == {"a": 1, "b": 1}
    assert sum(b.ok + b.failed for b in bins) == len(results)
    assert plots.per_second([], t0) == []


def test_drawings_write_pngs(tmp_path: Path) -> None:
    pytest.importorskip("matplotlib")
    bins = plots.per_second(
        [(0.1 * i, 0.1 * i + 0.05, 200 if i % 7 else 503, "ab"[i % 2]) for i in range(40)], 0.0
    )
    files = [
        plots.failover_timeline(bins, 2.0, tmp_path / "f.png"),
        plots.cost_bars(["x", "y"], {"x": 10}, {"x": 3, "y": 9}, tmp_path / "c.png"),
        plots.latency_cdfs(
            {"non-streaming": {"direct": [0.002, 0.003], "via gateway": [0.004, 0.006]}},
            tmp_path / "l.png",
            "t",
        ),
    ]
    for f in files:
        assert f.read_bytes()[:8] == PNG_MAGIC


def test_results_header_names_the_command_and_machine() -> None:
    head = report.results_header(
        "global", report.module_command("bench.global_bench", ["--quick", "--section", "cost"])
    )
    lines = head.splitlines()
    assert lines[0] == "# global"
    assert "`python -m bench.global_bench --quick --section cost`" in head
    assert any(line.startswith("- machine: ") for line in lines)
    assert head.endswith("\n\n")


def test_global_bench_knows_the_cost_section() -> None:
    assert list(global_bench.SECTIONS) == ["hop", "failover", "ratelimit", "cost", "netns", "faults"]
