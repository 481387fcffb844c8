"""The cluster gateway's `GET /`: one row per pod with what the last scrape said and what this
gateway sent, adapters loaded vs loadable, guarded like `/v1/models`; laid out by headless Chromium
at 1280 px without a wrapped cell (FLEETGATE_SCREENSHOT_DIR keeps `gateway_pods_1280.png`)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests.browser_layout import CHROMIUM, measure, screenshot

from .conftest import chat, running, tiny

WIDTH = 1280


async def test_pod_rows_with_load_adapters_and_totals(tmp_path: Path) -> None:
    specs = [
        tiny(adapters=["sql-lora", "support-lora", "summarize-lora"], preload_adapters=["sql-lora"]),
        tiny(adapters=["sql-lora"]),
        tiny(),
    ]
    async with running(specs) as (_fleet, gw, c):
        for _ in range(3):
            assert (await c.post("/v1/chat/completions", json=chat("hello"))).status_code == 200
        r = await c.get("/")
        assert r.status_code == 200 and r.headers["content-type"].startswith("text/html")
        page = r.text
        names = [p.endpoint.name for p in gw.pool.pods()]
    assert len(names) == 3 and all(f">{n}<" in page for n in names)
    assert "pods ready 3 / 3" in page and page.count('class="ok">ready<') == 3
    assert "summarize-lora" in page and "KV used<br>(%)" in page and "metrics<br>age (s)" in page
    sent = sum(int(cell) for cell in _column(page, 8))  # the `sent` column
    assert sent == 3

    if CHROMIUM is None:
        pytest.skip("layout check needs Chromium (Debian: apt-get install chromium)")
    shot = Path(os.environ.get("FLEETGATE_SCREENSHOT_DIR", tmp_path)) / "gateway_pods_1280.png"
    screenshot(page, shot, width=WIDTH, workdir=tmp_path)
    layout = measure(page, width=WIDTH, workdir=tmp_path)
    assert layout.wrapped == [] and layout.right <= WIDTH, layout


async def test_the_page_needs_what_v1_models_needs(tmp_path: Path) -> None:
    secret = tmp_path / "secret"
    secret.write_text("s" * 48)
    async with running([tiny()], auth={"mode": "hmac", "secretFile": str(secret)}) as (_fleet, _gw, c):
        r = await c.get("/")
        assert r.status_code == 401 and r.json()["error"]["code"] == "invalid_api_key"


def _column(page: str, index: int) -> list[str]:
    """Cell `index` of each pod row (rows start with `<tr><td class="l">`)."""
    import re

    rows = re.findall(r'<tr><td class="l">.*?</tr>', page)
    return [re.findall(r"<td[^>]*>(.*?)</td>", row)[index].replace(",", "") for row in rows]
