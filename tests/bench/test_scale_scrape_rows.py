"""The scrape-scale bench's in-process rows: the filtered body is smaller and cheaper to read and render."""

from __future__ import annotations

import sys
from typing import Any

import pytest

from bench import scale_scrape
from bench.promtext_bench import vllm_registry
from bench.scale_scrape import Row, parse_rows, render_rows, table
from cluster_gateway.metrics.engines import fetch_names
from cluster_gateway.metrics.filtered import metrics_path


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


async def _get(app: Any, path: str, query: bytes) -> bytes:
    sent: list[dict[str, Any]] = []

    async def receive() -> dict[str, Any]:
        return {"type": "http.request", "body": b"", "more_body": False}

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    scope = {
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "method": "GET",
        "scheme": "http",
        "path": path,
        "raw_path": path.encode(),
        "root_path": "",
        "query_string": query,
        "headers": [(b"host", b"pod")],
        "client": ("127.0.0.1", 1),
        "server": ("127.0.0.1", 8000),
    }
    await app(scope, receive, send)
    assert sent[0]["status"] == 200
    return b"".join(m.get("body", b"") for m in sent if m["type"] == "http.response.body")


@pytest.mark.parametrize("exact", [True, False])
async def test_the_bench_serves_metrics_as_vllm_does(exact: bool, monkeypatch: pytest.MonkeyPatch) -> None:
    """vLLM's /metrics ignores name[] (the instrumentator's route); /metrics/ filters (the Mount)."""
    if not exact:  # the routing-only stand-in used when fastapi is not installed
        monkeypatch.setitem(sys.modules, "fastapi", None)
    app, is_exact = scale_scrape._vllm_api_server(vllm_registry())
    if exact and not is_exact:
        pytest.skip("fastapi / prometheus-fastapi-instrumentator not installed (the bench extra)")
    assert is_exact == exact
    query = metrics_path(fetch_names("vllm", perf=False)).split("?", 1)[1].encode()
    whole = await _get(app, "/metrics", query)
    filtered = await _get(app, "/metrics/", query)
    assert b"_bucket{" in whole and len(whole) > 30_000
    assert b"_bucket{" not in filtered and len(filtered) < 3_000
    assert b"vllm:num_requests_waiting{" in filtered
