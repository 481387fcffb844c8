"""The outside load generator gets the very trace the built-in client replays, and the report puts
both side by side."""

from __future__ import annotations

import json
from pathlib import Path

from bench.outside_loadgen import (
    MODEL,
    Row,
    _guidellm_row,
    guidellm_command,
    guidellm_dataset,
    markdown,
    scenarios,
)
from bench.trace import generate


def test_guidellm_rows_are_the_traces_base_model_requests_at_their_offsets(tmp_path: Path) -> None:
    sc = scenarios(20.0, 1.5, 7)["lora-scarce"]
    reqs = generate(sc.trace)
    n = guidellm_dataset(reqs, tmp_path / "d.jsonl", MODEL)
    base = [r for r in reqs if r.model == MODEL]
    assert 0 < n == len(base) < len(reqs)  # adapters are left out (guidellm sends one model)
    rows = [json.loads(line) for line in (tmp_path / "d.jsonl").read_text().splitlines()]
    assert [r["output_tokens_count"] for r in rows] == [r.max_tokens for r in base]
    offsets = [r["relative_timestamp"] for r in rows]
    assert offsets[0] == 0.0 and offsets == sorted(offsets)
    assert abs(offsets[-1] - (base[-1].at_s - base[0].at_s)) < 1e-3
    assert all(r["prompt"] and r["system_prompt"] for r in rows)


def test_guidellm_command_replays_at_timestamps_through_the_gateway(tmp_path: Path) -> None:
    cmd = guidellm_command(
        "http://127.0.0.1:9999", tmp_path / "d.jsonl", 12, tmp_path / "tok", tmp_path / "o.json", 7
    )
    joined = " ".join(cmd)
    assert cmd[1] == "run"
    assert "kind=openai_http,target=http://127.0.0.1:9999" in joined
    assert "kind=replay,schedule_turn=timestamp" in joined
    assert "kind=max_requests,count=12" in joined


def test_report_sets_clients_side_by_side_with_ratios_to_round_robin() -> None:
    rows = [
        Row("no-adapters", "built-in", "round-robin", 10, 0, 1.0, 2.0, 4.0),
        Row("no-adapters", "built-in", "latency", 10, 0, 0.5, 1.0, 1.0),
        Row("no-adapters", "guidellm", "round-robin", 10, 0, 1.0, 4.0, 8.0),
        Row("no-adapters", "guidellm", "latency", 10, 1, 0.5, 2.0, 2.0, "note"),
    ]
    md = markdown(rows, "fleetgate bench loadgen", 4, None)
    assert "| no-adapters | built-in | latency | 10 | 0 | 0.50 | 1.00 | 1.00 | 0.50x / 0.25x |" in md
    assert "| no-adapters | guidellm | latency | 10 | 1 | 0.50 | 2.00 | 2.00 | 0.50x / 0.25x | note |" in md
    assert "guidellm skipped" not in md
    assert "guidellm skipped: not installed" in markdown(rows[:2], "c", 4, "not installed")


def test_guidellm_report_is_read_in_seconds_with_its_dispatch_lag() -> None:
    # the shape of guidellm 0.8.1's JSON report (only the fields read)
    pct = {"p50": 500.0, "p90": 900.0, "p99": 1500.0}
    report = {
        "benchmarks": [
            {
                "metrics": {
                    "time_to_first_token_ms": {"successful": {"percentiles": pct}},
                    "request_totals": {"successful": 7, "errored": 1, "incomplete": 0, "total": 8},
                    "root_dispatch_delay": {"percentiles": {"p95": 0.25}},
                }
            }
        ]
    }
    row = _guidellm_row("no-adapters", "latency", report, "")
    assert (row.requests, row.errors) == (8, 1)
    assert (row.ttft_p50, row.ttft_p90, row.ttft_p99) == (0.5, 0.9, 1.5)
    assert row.note == "dispatch lag p95 0.25 s"
