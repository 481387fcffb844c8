"""The estimate-accuracy scenario's arithmetic: time averages, histogram windows, the client window."""

from __future__ import annotations

import math

import pytest

from bench.estimate_accuracy import (
    RateRow,
    client_ttfts_ms,
    format_table,
    histogram_sum_count,
    time_weighted_mean,
    window_mean,
)
from bench.loadgen import Result


def test_time_average_weights_each_sample_by_how_long_it_held() -> None:
    # 100 ms for 1 s, then 400 ms for 3 s: a plain sample mean would say 250.
    assert time_weighted_mean([(0.0, 100.0), (1.0, 400.0)], end=4.0) == pytest.approx(325.0)
    assert math.isnan(time_weighted_mean([], end=1.0))


def test_histogram_window_mean_sums_label_sets_and_ignores_buckets() -> None:
    def body(s: float, c: int) -> str:
        return (
            f'vllm:time_to_first_token_seconds_bucket{{le="0.5",model_name="m"}} {c}\n'
            f'vllm:time_to_first_token_seconds_sum{{model_name="m"}} {s}\n'
            f'vllm:time_to_first_token_seconds_count{{model_name="m"}} {c}\n'
            "vllm:time_to_first_token_seconds_sum_other 99\n"
        )

    name = "vllm:time_to_first_token_seconds"
    before, after = histogram_sum_count(body(2.0, 10), name), histogram_sum_count(body(5.0, 16), name)
    assert before == (2.0, 10.0)
    assert window_mean(before, after) == pytest.approx(0.5)
    assert math.isnan(window_mean(after, after))  # nothing observed in the window
    assert histogram_sum_count("", name) == (0.0, 0.0)


def test_only_requests_sent_in_the_window_count() -> None:
    def res(at: float, ttft: float | None, status: int = 200) -> Result:
        return Result(at, "chat", "m", status, ttft, 1.0, 10)

    results = [res(1.0, 0.9), res(5.0, 0.2), res(6.0, None, 503), res(7.0, 0.4), res(12.0, 3.0)]
    ttfts, errors = client_ttfts_ms(results, 5.0, 10.0)
    assert ttfts == pytest.approx([200.0, 400.0])
    assert errors == 1


def test_table_states_the_ratio_of_estimate_to_measured() -> None:
    row = RateRow(rate=1.5, requests=90, client_mean_ms=400.0, client_p50_ms=320.0, est_mean_ms=360.0)
    row.engine_ms = {"ttft": 390.0, "queue": 60.0, "prefill": 330.0}
    table = format_table([row])
    assert "| 1.5 | 90 (0) | 400 | 320 | 390 / 60 / 330 |" in table
    assert "| 0.90 | 1.12 |" in table
