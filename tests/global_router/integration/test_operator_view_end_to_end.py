"""What an on-call operator sees, on a real router + gateway + simulated pods over loopback sockets:
a request id followed through both tiers' access logs to the pod, the router's capacity-stream and
token series, the gateway's per-pod token series, and a Grafana dashboard whose every panel
queries series these real scrapes expose."""

from __future__ import annotations

import json
import logging
import re
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

import modelsim.app
from global_router.router import GlobalRouter
from tests.eventually import eventually
from tests.global_router.integration.fleet_harness import (
    KEY,
    MODEL,
    SimCluster,
    fresh_ready,
    router_config,
    start_cluster,
    start_router,
)

pytestmark = pytest.mark.timeout(90)

DASHBOARD = Path(__file__).parents[3] / "deploy" / "grafana" / "fleetgate.json"
_PROMQL_WORDS = {
    "sum", "max", "min", "avg", "count", "rate", "irate", "increase", "histogram_quantile", "by",
    "without", "on", "ignoring", "group_left", "group_right", "and", "or", "unless", "le",
}  # fmt: skip


@pytest.fixture
async def fleet(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> AsyncIterator[tuple[GlobalRouter, SimCluster, list[str]]]:
    pod_ids: list[str] = []  # x-request-id of every chat request a pod received
    allowed, handler = modelsim.app.ROUTES["/v1/chat/completions"]

    async def recording(app: Any, scope: Any, receive: Any, send: Any) -> None:
        pod_ids.extend(v.decode() for k, v in scope["headers"] if k == b"x-request-id")
        await handler(app, scope, receive, send)

    monkeypatch.setitem(modelsim.app.ROUTES, "/v1/chat/completions", (allowed, recording))
    router = await start_router(router_config(["east"]))
    cluster = await start_cluster("east", tmp_path, router.grpc_port, pods=2)
    try:
        await eventually(fresh_ready(router, ["east"], min_pods=2), within=20, what="east fresh")
        yield router, cluster, pod_ids
    finally:
        await cluster.stop()
        await router.stop()


def _families(body: str) -> dict[str, Any]:
    return {f.name: f for f in text_string_to_metric_families(body)}


def _sample_names(families: dict[str, Any]) -> set[str]:
    """Every sample name a family can show (a labelled family with no child yet still counts)."""
    names: set[str] = set()
    for name, f in families.items():
        names |= {s.name for s in f.samples}
        suffixes = {"counter": ("_total",), "histogram": ("_bucket", "_sum", "_count")}.get(f.type, ("",))
        names |= {name + s for s in suffixes}
    return names


def _metric_names(expr: str) -> set[str]:
    """The series names a PromQL expression selects (labels, functions, grouping clauses dropped)."""
    expr = re.sub(r'"[^"]*"', "", expr)
    expr = re.sub(r"\{[^}]*\}", "", expr)
    expr = re.sub(r"\[[^\]]*\]", "", expr)
    expr = re.sub(r"\b(by|without)\s*\([^)]*\)", "", expr)
    return {w for w in re.findall(r"[A-Za-z_:][A-Za-z0-9_:]*", expr) if w not in _PROMQL_WORDS}


async def test_request_id_through_both_tiers_and_the_series_operators_need(
    fleet: tuple[GlobalRouter, SimCluster, list[str]], caplog: pytest.LogCaptureFixture
) -> None:
    router, cluster, pod_ids = fleet
    caplog.set_level(logging.INFO, logger="fleetgate.access")
    headers = {"authorization": f"Bearer {KEY}", "x-request-id": "abc"}
    body = {"model": MODEL, "messages": [{"role": "user", "content": "hello there"}], "max_tokens": 6}
    async with httpx.AsyncClient(timeout=30) as client:
        r = await client.post(f"{router.url}/v1/chat/completions", json=body, headers=headers)
        assert r.status_code == 200, r.text
        assert r.headers["x-request-id"] == "abc"
        usage = r.json()["usage"]
        stream_body = {**body, "stream": True, "stream_options": {"include_usage": True}}
        streamed = {**headers, "x-request-id": "abc-stream"}
        async with client.stream(
            "POST", f"{router.url}/v1/chat/completions", json=stream_body, headers=streamed
        ) as s:
            assert s.status_code == 200 and s.headers["x-request-id"] == "abc-stream"
            async for _ in s.aiter_bytes():
                pass

        lines = [
            r for r in caplog.records if r.name == "fleetgate.access" and r.__dict__["request_id"] == "abc"
        ]
        targets = {r.__dict__["target"] for r in lines}
        pods = {p.name for p in cluster.gateway.pool.pods()}
        assert "east" in targets and targets - {"east"} <= pods and len(lines) == 2, (
            targets
        )  # router + gateway
        for line in lines:
            assert line.__dict__["prompt_tokens"] == usage["prompt_tokens"]
            assert line.__dict__["completion_tokens"] == usage["completion_tokens"]
        assert pod_ids.count("abc") == 1 and "abc-stream" in pod_ids  # the id reached the pod

        unknown = {**body, "model": "made-up-model"}  # refused: a client's name must not become a series
        r = await client.post(f"{router.url}/v1/chat/completions", json=unknown, headers=headers)
        assert r.status_code in (404, 503) and r.headers["x-request-id"] == "abc"  # 503 while warming up

        router_text = (await client.get(f"{router.url}/metrics")).text
        gateway_text = (await client.get(f"{cluster.gateway.url}/metrics")).text

    assert "made-up-model" not in router_text and "made-up-model" not in gateway_text
    rf = _families(router_text)
    assert rf["fleetgate_capacity_agent_streams"].samples[0].value == 1.0
    accepted = [s for s in rf["fleetgate_capacity_reports"].samples if s.name.endswith("_total")]
    assert sum(s.value for s in accepted) >= 1
    tokens = {
        s.labels["gen_ai_token_type"]: s.value
        for s in rf["gen_ai_client_token_usage"].samples
        if s.name.endswith("_sum") and s.labels["cluster"] == "east" and s.labels["tenant"] == "web"
        and s.labels["gen_ai_request_model"] == MODEL and s.labels["traffic_class"] == "interactive"
    }  # fmt: skip
    assert (
        tokens["input"] >= 2 * usage["prompt_tokens"] - 1 and tokens["output"] >= usage["completion_tokens"]
    )
    ttft = [s for s in rf["gen_ai_server_time_to_first_token_seconds"].samples if s.name.endswith("_count")]
    assert sum(s.value for s in ttft) == 2

    gf = _families(gateway_text)
    per_pod = [s for s in gf["fleetgate_gateway_tokens"].samples if s.labels["gen_ai_token_type"] == "output"]
    assert {s.labels["pod"] for s in per_pod} <= pods and sum(s.value for s in per_pod) >= usage[
        "completion_tokens"
    ]

    # the dashboard: every panel queries series that exist in these scrapes
    dashboard = json.loads(DASHBOARD.read_text())
    scraped = {"router": _sample_names(rf), "gateway": _sample_names(gf)}
    panels = [p for p in dashboard["panels"] if p["type"] != "row"]
    assert len(panels) >= 20
    for panel in panels:
        assert panel["targets"], panel["title"]
        for target in panel["targets"]:
            expr = target["expr"]
            tier = "router" if "$router_job" in expr else "gateway"
            assert ("$gateway_job" in expr) != (tier == "router"), expr
            names = _metric_names(expr)
            assert names, expr
            missing = names - scraped[tier]
            assert not missing, f"panel {panel['title']!r}: {sorted(missing)} not in a real {tier} scrape"
