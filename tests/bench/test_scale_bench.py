"""`fleetgate bench scale`: the sections it measures render into one report with a log-log plot, and
the scrape section is skipped with a note while its module is absent."""

from __future__ import annotations

from pathlib import Path

import pytest

from bench import cli, prefix_memory, scale, scale_router


def test_the_scrape_section_says_when_it_is_skipped(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(scale, "SCRAPE_MODULE", "bench.no_such_scrape_module")
    text, rows = scale.scrape_section(quick=True)
    assert "skipped" in text and "bench.no_such_scrape_module" in text and rows == []


def test_small_measurements_render_and_plot(tmp_path: Path) -> None:
    pods = [scale.PodRow(10, 1.0, 2.0, 1.0, scale._build_ms(10, 2)), scale.PodRow(100, 2.0, 3.0, 4.0, 0.5)]
    clusters = [
        scale.ClusterRow(n, scale_router.run_one(n, 20), scale_router.run_one(n, 20, indexed=False))
        for n in (3, 30)
    ]
    memory = prefix_memory.measure(pods=20, budget_blocks=2000)
    text = scale.render(pods, clusters, "_scrapes: n/a_", memory)
    for heading in ("### Tier 1, by pool size", "### Tier 2, by fleet size", "### Prefix index memory"):
        assert heading in text
    assert "| 30 |" in text and memory.blocks == 2000
    png = scale.plot(pods, clusters, [], tmp_path / "scale.png")
    assert png.stat().st_size > 1000


def test_the_indexed_router_scores_fewer_clusters_than_it_knows() -> None:
    row = scale_router.run_one(60, 30)
    full = scale_router.run_one(60, 30, indexed=False)
    assert row.candidates <= 10 < full.candidates == 60


def test_scale_is_a_registered_scenario() -> None:
    assert cli.SCENARIOS["scale"].module == "bench.scale" and cli.SCENARIOS["scale"].own_report
