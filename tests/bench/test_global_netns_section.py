"""The netns section of `bench global` reports one `skipped` row (with the reason) where namespaces
cannot be made, so `--section all` still finishes on an unprivileged machine."""

from __future__ import annotations

import pytest

from bench import global_bench, global_netns


async def test_section_reports_why_it_skipped(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(global_netns.netns, "unavailable_reason", lambda: "network namespaces need root")
    rows = await global_bench.section_netns(quick=True)
    assert [(r.section, r.metric, r.value, r.note) for r in rows] == [
        ("netns", "skipped", "-", "network namespaces need root")
    ]


def test_section_is_registered() -> None:
    assert global_bench.SECTIONS["netns"] is global_bench.section_netns
