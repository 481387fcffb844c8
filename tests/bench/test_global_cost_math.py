"""The cost section's pure parts: per-token attribution, run summaries, the A/B router configs, tables.

No fleet is started here; `python -m bench.global_bench --section cost` is the end-to-end run.
"""

from __future__ import annotations

import math

import pytest

from bench import global_bench
from bench.global_cost import (
    CLUSTERS,
    REF_BATCH,
    CostCluster,
    LoadSpec,
    Outcome,
    cost_rows,
    dollars,
    mean_busy_batch,
    router_sections,
    schedule,
    summarise,
    tokens_by_cluster,
    tokens_per_s_per_gpu,
)
from common.config.loader import load_config_data
from common.config.router import GlobalRouterConfig
from modelsim.profiles import get_profile


def test_an_hour_of_one_gpus_tokens_costs_its_hourly_price() -> None:
    tps = tokens_per_s_per_gpu(get_profile("a100-llama3-8b"), 16, 800)
    assert dollars(tps * 3600, 1.30, tps) == pytest.approx(1.30)
    assert dollars(tps * 1800, 1.30, tps) == pytest.approx(0.65)
    assert dollars(0, 1.30, tps) == 0.0


def test_profile_throughput_follows_the_step_model() -> None:
    h100, l4 = get_profile("h100-llama3-8b"), get_profile("l4-llama3-8b")
    for p in (h100, l4):
        expected = 8 / p.step_seconds(8, 8, 8 * 500)
        assert tokens_per_s_per_gpu(p, 8, 500) == pytest.approx(expected)
        # continuous batching: more sequences per step, more tokens per second
        assert tokens_per_s_per_gpu(p, 32, 500) > tokens_per_s_per_gpu(p, 8, 500)
    assert tokens_per_s_per_gpu(h100, 8, 500) > tokens_per_s_per_gpu(l4, 8, 500)


def test_busy_batch_ignores_idle_samples_and_never_drops_below_one() -> None:
    assert mean_busy_batch([0, 0, 4, 6]) == pytest.approx(5)
    assert mean_busy_batch([0, 0]) == 1.0
    assert mean_busy_batch([0.2]) == 1.0


def _o(tenant: str, cluster: str, tokens: int, ttft: float | None = None, status: int = 200) -> Outcome:
    return Outcome(0.0, tenant, status, cluster, ttft, 1.0, prompt_tokens=400, completion_tokens=tokens)


def test_only_answered_batch_requests_count_per_cluster() -> None:
    outs = [_o("batch", "a", 10), _o("batch", "a", 5), _o("batch", "b", 7), _o("batch", "b", 9, status=503)]
    outs.append(_o("interactive", "a", 100, 0.05))
    assert tokens_by_cluster(outs, "batch") == {"a": 15, "b": 7}


TWO = (CostCluster("dear", "h100-llama3-8b", 1, 4.0), CostCluster("cheap", "a100-llama3-8b", 1, 1.0))


def test_moving_batch_tokens_to_the_cheaper_per_token_cluster_is_a_saving() -> None:
    shaped = summarise(
        "shaped",
        [_o("batch", "cheap", 100) for _ in range(5)] + [_o("interactive", "dear", 100, 0.02)],
        TWO,
        {"dear": [4.0], "cheap": [4.0]},
        10.0,
    )
    baseline = summarise(
        "baseline",
        [_o("batch", "dear", 100) for _ in range(5)] + [_o("interactive", "dear", 100, 0.02)],
        TWO,
        {"dear": [4.0], "cheap": [4.0]},
        10.0,
    )
    assert shaped.batch_tokens == {"cheap": 500} and baseline.batch_tokens == {"dear": 500}
    # every request on either cluster has the same context, so each side's price is the profile's
    ctx = 400 + 100 / 2
    per_tok = {
        c.cluster_id: dollars(1, c.cost_per_gpu_hour, tokens_per_s_per_gpu(get_profile(c.profile), 4, ctx))
        for c in TWO
    }
    assert shaped.batch_cost == pytest.approx(500 * per_tok["cheap"])
    assert baseline.batch_cost == pytest.approx(500 * per_tok["dear"])
    rows = {r.metric: r for r in cost_rows(shaped, baseline, TWO)}
    saved = float(rows["batch cost saved (1 - shaped/baseline)"].value.rstrip("%"))
    assert saved == pytest.approx((1 - per_tok["cheap"] / per_tok["dear"]) * 100, abs=0.05)
    assert saved > 0
    ref = rows[f"batch cost saved at rate-card throughput ({REF_BATCH} seqs/GPU everywhere)"]
    assert float(ref.value.rstrip("%")) > 0


def test_interactive_ttft_percentiles_and_errors_per_tenant() -> None:
    outs = [_o("interactive", "dear", 20, ttft=(i + 1) / 1000) for i in range(100)]
    outs += [_o("interactive", "-", 0, status=0), _o("batch", "-", 0, status=429), _o("batch", "cheap", 50)]
    s = summarise("shaped", outs, TWO, {}, 5.0)
    assert s.ttft_ms[50] == pytest.approx(50) and s.ttft_ms[99] == pytest.approx(99)
    assert s.errors == {"interactive": 1, "batch": 1}
    assert s.requests == {"interactive": 101, "batch": 2}
    assert s.interactive_requests == {"dear": 100}


def test_no_baseline_spend_gives_nan_not_a_division_error() -> None:
    empty = summarise("baseline", [], TWO, {}, 1.0)
    rows = {r.metric: r.value for r in cost_rows(empty, empty, TWO)}
    assert rows["batch cost saved (1 - shaped/baseline)"] == "nan%"
    assert math.isnan(empty.ttft_ms[50])


def test_schedule_is_seeded_sorted_and_bounded() -> None:
    spec = LoadSpec(duration_s=60.0, interactive_rps=2.0, batch_rps=1.0, seed=3)
    a, b = schedule(spec), schedule(spec)
    assert a == b
    assert [x.at_s for x in a] == sorted(x.at_s for x in a)
    assert all(0 <= x.at_s < spec.duration_s for x in a)
    counts = {t: sum(1 for x in a if x.tenant == t) for t in ("interactive", "batch")}
    # Poisson counts: mean rate * duration, well within 5 standard deviations
    for tenant, rate in (("interactive", 2.0), ("batch", 1.0)):
        mean = rate * spec.duration_s
        assert abs(counts[tenant] - mean) < 5 * math.sqrt(mean)
    assert schedule(LoadSpec(duration_s=60.0, seed=4)) != a


def test_baseline_differs_from_shaped_only_in_the_batch_cost_weight() -> None:
    def config(cost_blind: bool) -> GlobalRouterConfig:
        tenants, selection = router_sections(cost_blind)
        data = {"tenants": tenants, **({"selection": selection} if selection else {})}
        return load_config_data(data, GlobalRouterConfig)

    shaped, blind = config(False), config(True)
    assert [t.traffic_class for t in shaped.tenants] == ["interactive", "batch"]
    assert shaped.tenants == blind.tenants
    s_cls, b_cls = shaped.selection.classes, blind.selection.classes
    assert s_cls["interactive"] == b_cls["interactive"]
    assert s_cls["batch"].gateway_profile == b_cls["batch"].gateway_profile
    assert s_cls["batch"].weights.cost > 0 and b_cls["batch"].weights.cost == 0
    for name in ("headroom", "queue", "ttft", "region"):
        assert getattr(s_cls["batch"].weights, name) == getattr(b_cls["batch"].weights, name)


def test_cost_table_renders_one_row_per_metric_with_pipes_escaped() -> None:
    s = summarise("shaped", [_o("batch", c.cluster_id, 10) for c in CLUSTERS], CLUSTERS, {}, 1.0)
    rows = cost_rows(s, s, CLUSTERS)
    rows.append(global_bench.Row("cost", "a | b", "1", "x|y"))
    text = global_bench.table(rows)
    lines = text.splitlines()
    assert len(lines) == 2 + len(rows)
    assert all(line.count(" | ") == 3 for line in lines[2:])  # four cells each, pipes in cells escaped
    assert "a \\| b" in lines[-1]
    for c in CLUSTERS:
        assert f"batch tokens on {c.cluster_id}" in text
