"""The scrape-scale bench's in-process rows: the filtered body is smaller and cheaper to read and render."""

from __future__ import annotations

from bench.scale_scrape import Row, parse_rows, render_rows, table


def test_filtered_bodies_are_cheaper_to_parse_and_render() -> None:
    rows = {r.measure: r for r in parse_rows(20) + render_rows(5)}
    whole = rows["parse, whole body (before)"]
    memo = rows["parse, filtered body, unchanged lines memoised (now)"]
    assert all(isinstance(r, Row) and r.value > 0 for r in rows.values())
    assert memo.value < whole.value
    assert float(memo.note.split()[0]) < float(whole.note.split()[0]) / 10  # KB: ~2 vs ~42
    render = [r.value for r in rows.values() if r.measure.startswith("prometheus_client render")]
    assert render[1] < render[0] / 5
    assert "| parse, whole body (before) |" in table(list(rows.values()))
