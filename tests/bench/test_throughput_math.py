"""The throughput bench's pure parts: wrk's report parsed, the added-latency and ratio math, the
Lua script, and the table (the issue's columns, medians over runs, failures kept with their logs)."""

from __future__ import annotations

import math
from collections import Counter

import pytest

from bench import throughput as tp
from bench import wrk

WRK_REPORT = """\
Running 4s test @ http://127.0.0.1:41235/v1/chat/completions
  2 threads and 64 connections
  Thread Stats   Avg      Stdev     Max   +/- Stdev
    Latency     3.69ms    2.01ms  38.86ms   87.54%
    Req/Sec     8.79k     1.25k   11.18k    71.25%
  Latency Distribution
     50%    3.20ms
     75%    4.24ms
     90%    5.67ms
     99%  850.00us
  70012 requests in 4.01s, 21.36MB read
  Socket errors: connect 0, read 3, write 0, timeout 2
  Non-2xx or 3xx responses: 12
Requests/sec:  17459.35
Transfer/sec:      5.33MB
"""


def test_wrk_report_is_parsed_with_units_and_errors() -> None:
    r = wrk.parse(WRK_REPORT)
    assert r.requests == 70012 and r.seconds == pytest.approx(4.01)
    assert r.non_2xx == 12
    assert r.socket_errors == {"connect": 0, "read": 3, "write": 0, "timeout": 2}
    assert r.errors == 17
    assert r.latency_ms == {
        50: pytest.approx(3.2),
        75: pytest.approx(4.24),
        90: pytest.approx(5.67),
        99: 0.85,
    }
    # non-2xx answers are not throughput
    assert r.ok_rps == pytest.approx((70012 - 12) / 4.01)


def test_wrk_report_without_errors_or_in_minutes() -> None:
    text = "  120 requests in 1.00m, 1.00KB read\nRequests/sec:      2.00\n"
    r = wrk.parse(text)
    assert (r.requests, r.seconds, r.errors, r.latency_ms) == (120, 60.0, 0, {})
    assert r.ok_rps == pytest.approx(2.0)


def test_something_that_is_not_a_wrk_report_is_an_error_not_zero() -> None:
    with pytest.raises(ValueError, match="not a wrk report"):
        wrk.parse("unable to connect to 127.0.0.1:1 Connection refused\n")


def test_lua_script_posts_the_json_body_with_headers() -> None:
    script = wrk.lua_script({"model": "m", "stream": False}, {"authorization": "Bearer k"})
    assert 'wrk.method = "POST"' in script
    assert 'wrk.body = [==[{"model":"m","stream":false}]==]' in script
    assert 'wrk.headers["Content-Type"] = [==[application/json]==]' in script
    assert 'wrk.headers["authorization"] = [==[Bearer k]==]' in script
    with pytest.raises(ValueError):
        wrk.lua_script({"x": "]==]"})


def test_added_latency_is_the_difference_of_percentiles() -> None:
    direct = [0.001] * 99 + [0.002]
    via = [0.003] * 99 + [0.010]
    p50, p99 = tp.added(via, direct)
    assert p50 == pytest.approx(2.0) and p99 == pytest.approx(2.0)  # nearest rank: p99 of 100 is the 99th
    p50, p99 = tp.added([*via, 0.010], [*direct, 0.002])
    assert p99 == pytest.approx(8.0)
    assert all(math.isnan(x) for x in tp.added([], direct))


def test_ratio_median_span_and_per_unit() -> None:
    assert tp.ratio(300.0, 6000.0) == "0.05"
    assert tp.ratio(1.0, math.nan) == "n/a" and tp.ratio(1.0, 0.0) == "n/a"
    assert tp.median([1.0, math.nan, 3.0]) == 2.0 and math.isnan(tp.median([math.nan]))
    assert tp.span([545, 1776]) == "545\u20131,776" and tp.span([0, 0]) == "0"
    assert tp.per_unit_ms(0.5, 1000) == pytest.approx(0.5) and math.isnan(tp.per_unit_ms(1.0, 0))


def test_big_prompt_has_the_asked_size() -> None:
    assert len(tp.big_prompt(220).encode()) == 220 * 1024


def _run(
    key: str, name: str, rps: float, cpu: float, failed2000: int = 0, added: tuple[float, float] = (0.5, 0.9)
) -> tp.RowRun:
    r = tp.RowRun(key, name)
    r.rps = {8: rps / 2, 64: rps, 128: rps}
    r.wrk_errors = {8: 0, 64: 0, 128: 0}
    r.cpu_ms = {8: cpu, 64: cpu, 128: cpu * 1.5}
    r.wrk_p50_p99_ms = (1.0, 2.0)
    r.added_ms = added
    r.big_prompt_ms = 12.0
    errs = Counter({"timeout": failed2000}) if failed2000 else Counter[str]()
    r.streams = {
        500: tp.Streams(500, Counter(), 200.0, 300.0, cpu * 10, 1.0),
        2000: tp.Streams(2000, errs, 400.0, 900.0, cpu * 20, 5.0),
    }
    r.peak_rss_mb = 50.0
    return r


def test_table_has_the_issues_columns_medians_and_ratios() -> None:
    plan = tp.QUICK
    by_key = {
        "direct": [_run("direct", "direct (backend alone)", 20000, math.nan)],
        "sglang": [
            _run("sglang", "sglang-router 0.3.2", 6000, 0.2),
            _run("sglang", "sglang-router 0.3.2", 8000, 0.2),
        ],
        "embedded": [_run("embedded", "Fleetgate embedded proxy", 3000, 1.0, failed2000=7, added=(1.0, 1.5))],
        "litellm": [
            tp.RowRun("litellm", "LiteLLM proxy", failure="did not start: exited with 1; log /x.log")
        ],
    }
    text = tp.render(by_key, plan)
    main, details = text.split("\n\n")[:2]
    assert main.splitlines()[0] == (
        "| router | req/s c64 | \u00d7 sglang-router | added p50/p99 ms @20 rps | 2,000 concurrent streams "
        "| CPU ms/request | 500-stream TTFB p50/p99 ms |"
    )
    lines = {ln.split(" | ")[0].lstrip("| "): ln for ln in main.splitlines()[2:]}
    # sglang's median of 6,000 and 8,000 is the base of the ratio column
    assert (
        "| sglang-router 0.3.2 | 7,000 | 1.00 | 0.5 / 0.9 | 0 errors | 0.20 | 200 / 300 |"
        in lines["sglang-router 0.3.2"]
    )
    assert "| 3,000 | 0.43 |" in lines["Fleetgate embedded proxy"]
    assert "**7 of 2,000 failed** (7 \u00d7 timeout)" in lines["Fleetgate embedded proxy"]
    assert "| direct (backend alone) | 20,000 | 2.86 | \u2014 |" in lines["direct (backend alone)"]
    assert "| LiteLLM proxy **FAILED** | \u2014 |" in main
    assert "- **LiteLLM proxy FAILED**: did not start: exited with 1; log /x.log" in text
    # the flatness columns (c128 / c8 and 2,000 / 500 streams), then the same-run ratios to
    # sglang-router's 2,000-stream TTFB p99 (900 ms, as sglang's) and added p50 (1.0 over 0.5 ms)
    emb = next(ln for ln in details.splitlines() if ln.startswith("| Fleetgate embedded proxy"))
    assert "| 1.00 / 1.00 / 1.50 | 1.50 | 10.0 / 20.0 | 2.00 | 400 / 900 | 1.00 | 2.00 | 12.0 | 50 |" in emb
    assert "TTFB p99 \u00d7 sglang-router | added p50 \u00d7 sglang-router |" in details.splitlines()[0]
    lite = next(ln for ln in details.splitlines() if ln.startswith("| LiteLLM proxy"))
    assert lite.count("\u2014") == 11


def test_an_error_answer_is_quoted_once_per_kind() -> None:
    r = _run("envoy", "Fleetgate Envoy + ext_proc picker", 400, 2.0, failed2000=3)
    r.streams[2000].errors = Counter({"HTTP 500": 3})
    r.streams[2000].samples = {"HTTP 500": '{"error": {"message": "overflow"}}\n'}
    text = tp.render({"envoy": [r]}, tp.QUICK)
    assert text.count("streams answered HTTP 500") == 1
    assert (
        '- Fleetgate Envoy + ext_proc picker, streams answered HTTP 500: `{"error": {"message": "overflow"}}`'
        in text
    )


def test_a_router_that_died_keeps_its_figures_and_says_so() -> None:
    r = _run("global", "Fleetgate global router + gateway", 80, 4.0)
    r.died = "global-router exited with -11 during the measurement; log /r.log: boom"
    text = tp.render({"global": [r]}, tp.QUICK)
    assert "| Fleetgate global router + gateway **(died)** | 80 |" in text
    assert "- **Fleetgate global router + gateway DIED**: global-router exited with -11" in text


def test_rows_failing_every_run_and_missing_baseline() -> None:
    by_key = {"embedded": [_run("embedded", "Fleetgate embedded proxy", 3000, 1.0)]}
    text = tp.render(by_key, tp.QUICK)
    assert "| Fleetgate embedded proxy | 3,000 | n/a |" in text  # no sglang-router row: no ratio


def test_envoy_gets_half_the_cores_and_at_least_one_worker() -> None:
    assert [tp.envoy_workers(n) for n in (1, 2, 3, 8)] == [1, 1, 1, 4]
