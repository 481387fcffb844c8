"""The routing headline condenses the per-scenario JSON: the best tuned peer is taken per percentile
(the strictest comparison for `latency`), failed rows never count as a peer's best, and the gain
column is `latency` against that best."""

from __future__ import annotations

import json
from pathlib import Path

from bench.routing_headline import best, load, table


def _row(p90: float, p99: float, failure: str = "") -> dict[str, object]:
    return {"ttft_p90": p90, "ttft_p99": p99, "failure": failure}


POLICIES = {
    "round-robin": _row(4.0, 20.0),
    "reference": _row(1.0, 7.0),
    "latency": _row(0.5, 1.5),
    "sglang:cache_aware": _row(8.0, 30.0),
    "sglang:cache_aware@tuned": _row(2.0, 10.0),
    "vllm:power_of_two@tuned": _row(2.5, 3.0),
    "vllm:cache_aware@tuned": _row(0.1, 0.2, failure="did not start"),
}


def test_best_tuned_peer_is_taken_per_percentile_and_skips_failed_rows() -> None:
    assert best(POLICIES, True, "ttft_p90") == ("sglang:cache_aware@tuned", 2.0)
    assert best(POLICIES, True, "ttft_p99") == ("vllm:power_of_two@tuned", 3.0)
    assert best(POLICIES, False, "ttft_p90") == ("sglang:cache_aware", 8.0)


def test_table_reads_the_scenario_json_in_registry_order(tmp_path: Path) -> None:
    for name, load_avg in (("steady", [0.5, 0.7]), ("lora-scarce", [3.0, 6.0])):
        record = {"scenario": name, "policies": POLICIES, "load_avg": load_avg}
        (tmp_path / f"routing_{name}_quick.json").write_text(json.dumps(record))
    records = load(tmp_path, quick=True)
    assert [r["scenario"] for r in records] == ["lora-scarce", "steady"]
    assert load(tmp_path, quick=False) == []
    lines = table(records).splitlines()
    assert lines[2] == (
        "| `lora-scarce` | 4.00 / 20.00 | 8.00 / 30.00 (sglang:cache_aware) "
        "| 2.00 / 3.00 (sglang:cache_aware / vllm:power_of_two) | 1.00 / 7.00 | 0.50 / 1.50 | -75% / -50% "
        "| loaded (6.0) |"
    )
    assert lines[3].endswith("| quiet (0.7) |")


def test_detail_lists_every_policy_and_marks_failed_ones() -> None:
    from bench.routing_headline import detail

    policies = {
        "round-robin": {
            **_row(4.0, 20.0),
            "ttft_p50": 1.0,
            "ttft_mean": 2.0,
            "errors": 0,
            "pod_requests": [3, 4],
        },
        "vllm:cache_aware@tuned": _row(0.1, 0.2, failure="did not start: port taken"),
    }
    text = detail({"scenario": "steady", "requests": 7, "wall_s": 90.0, "policies": policies})
    assert "| round-robin | 1.00 | 4.00 | 20.00 | 2.00 | 0 | 3/4 | n/a |" in text
    assert "| vllm:cache_aware@tuned | FAILED: did not start: port taken |" in text
