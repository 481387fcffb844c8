"""The router's status page as an operator sees it: served by a real router over real (fake)
gateways, then laid out by headless Chromium at 1280 px. Checked: nothing is wider than the window,
no table cell wraps onto a second line, and the figures an operator needs are there with units.

Set FLEETGATE_SCREENSHOT_DIR to keep the PNG (`status_page_1280.png`) and look at it."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from global_router.fleet_view import ClusterState, ModelCapacity
from tests.browser_layout import CHROMIUM, measure, screenshot
from tests.global_router.fleet_fixtures import MODEL
from tests.global_router.router_harness import ADMIN_KEY, harness

WIDTH = 1280


def _cluster(cid: str, region: str, *, models: dict[str, ModelCapacity], **kw: object) -> ClusterState:
    base: dict[str, object] = dict(
        cluster_id=cid, region=region, zone=f"{region}-a", gateway_url="", seq=1, received_at=time.time(),
        models=models, cost_per_gpu_hour=2.0, gpus=3, capacity_type="on-demand", draining=False,
    )  # fmt: skip
    base.update(kw)
    return ClusterState(**base)  # type: ignore[arg-type]


def _model(name: str, *, resident: set[str], loadable: set[str], **kw: object) -> ModelCapacity:
    base: dict[str, object] = dict(
        model=name, ready_pods=3, saturated_pods=1, queued=4, running=12, kv_headroom=0.62,
        adapters=frozenset(resident | loadable), adapters_resident=frozenset(resident), est_ttft_ms=142.0,
        tokens_per_s=2400.0, headroom_requests=37, gpu_tokens_per_s=36464.7,
    )  # fmt: skip
    base.update(kw)
    return ModelCapacity(**base)  # type: ignore[arg-type]


@pytest.mark.skipif(CHROMIUM is None, reason="needs Chromium (Debian: apt-get install chromium)")
@pytest.mark.timeout(240)
async def test_status_page_fits_1280_px_without_wrapping_and_explains_its_units(tmp_path: Path) -> None:
    lora = {f"{n}-lora" for n in ("sql", "support", "summarize", "translate", "legal", "medical")}
    async with harness(["us-east-1", "eu-west-1"]) as h:
        clusters = [
            _cluster("us-east-1", "us-east", cost_per_gpu_hour=4.0, models={
                MODEL: _model(MODEL, resident={"sql-lora", "support-lora"}, loadable=lora),
                "meta-llama/Llama-3.1-70B-Instruct": _model(
                    "meta-llama/Llama-3.1-70B-Instruct", resident=set(), loadable=set(), est_ttft_ms=850.0
                ),
            }),
            _cluster("eu-west-1", "eu-west", capacity_type="spot", cost_per_gpu_hour=1.3,
                     models={MODEL: _model(MODEL, resident={"sql-lora"}, loadable={"summarize-lora"})}),
            _cluster("ap-south-1", "ap-south", cost_per_gpu_hour=0.8, gpus=2, received_at=time.time() - 40,
                     models={MODEL: _model(MODEL, resident=set(), loadable=set(), ready_pods=2)}),
        ]  # fmt: skip
        for c in clusters:
            gw = h.gateways.get(c.cluster_id)
            await h.fleet.publish(c if gw is None else _with_url(c, gw.url))
        r = await h.client.post("/admin/clusters/eu-west-1/drain", headers=h.headers(ADMIN_KEY))
        assert r.status_code == 200
        body = {"model": MODEL, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 4}
        for _ in range(3):
            r = await h.client.post("/v1/chat/completions", json=body, headers=h.headers())
            assert r.status_code == 200
        for gw in h.gateways.values():
            gw.mode = "error500"  # every attempt fails: one request with an error outcome
        r = await h.client.post("/v1/chat/completions", json=body, headers=h.headers())
        assert r.status_code >= 500
        r = await h.client.post("/v1/chat/completions", json=body, headers=h.headers("sk-wrong"))
        assert r.status_code == 401  # refused by the router
        page = (await h.client.get("/", headers=h.headers(ADMIN_KEY))).text
        fleet = (await h.client.get("/fleet", headers=h.headers(ADMIN_KEY))).json()

    us = next(c for c in fleet["clusters"] if c["id"] == "us-east-1")
    assert (
        us["outcomes"].get("ok", 0)
        + next(c for c in fleet["clusters"] if c["id"] == "eu-west-1")["outcomes"].get("ok", 0)
        == 3
    ), fleet["clusters"]
    totals = fleet["router"]["totals"]
    assert totals["requests"] == 5 and totals["errors"] == 1 and totals["refused"] == 1, totals
    for unit in (
        "report age<br>(s)",
        "$ per<br>GPU-hour",
        "est. TTFT<br>(ms)",
        "KV free<br>(%)",
        "headroom<br>(requests)",
    ):
        assert unit in page
    assert "failover retries left" in page and "retry budget left" not in page
    assert "<b>sql-lora</b>" in page and "translate-lora" in page  # resident bold, loadable plain
    assert "draining (operator)" in page and ">stale<" in page

    shot = Path(os.environ.get("FLEETGATE_SCREENSHOT_DIR", tmp_path)) / "status_page_1280.png"
    screenshot(page, shot, width=WIDTH, workdir=tmp_path)
    assert shot.exists() and shot.stat().st_size > 10_000
    layout = measure(page, width=WIDTH, workdir=tmp_path)
    assert layout.wrapped == [], layout
    assert layout.right <= WIDTH and layout.scroll_width <= WIDTH, layout


def _with_url(c: ClusterState, url: str) -> ClusterState:
    from dataclasses import replace

    return replace(c, gateway_url=url)
