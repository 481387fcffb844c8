"""`python -m bench.check_path`: every timed check is a real pick, released again."""

from __future__ import annotations

import asyncio
import json

import pytest

from bench import check_path


def test_each_check_picks_a_pod_and_the_release_frees_its_slot() -> None:
    p = check_path.plane(3)
    body = json.dumps({"model": check_path.MODEL, "messages": [{"role": "user", "content": "hi"}]}).encode()
    seconds = asyncio.run(check_path.checks(p, 60, body))
    assert seconds > 0
    assert p.check is not None and len(p.check.ledger) == 0  # all 60 released
    assert all(pod.inflight == 0 for pod in p.pool.pods())
    ok = sum(
        s.value
        for m in p.metrics.registry.collect()
        for s in m.samples
        if s.name == "fleetgate_gateway_requests_total" and s.labels.get("outcome") == "ok"
    )
    assert ok == 60


def test_main_prints_the_median(capsys: pytest.CaptureFixture[str]) -> None:
    assert check_path.main(["--pods", "2", "--checks", "50", "--rounds", "1"]) == 0
    assert "µs per check + release" in capsys.readouterr().out
