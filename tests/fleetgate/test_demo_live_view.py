"""The live view: rows built from real `/fleet` and `/admin/state` shapes, drawn as a table or a line."""

from __future__ import annotations

import io

from fleetgate.demo_fleet import BASE_MODEL, DEFAULT_FLEET
from fleetgate.demo_load import LoadStats
from fleetgate.demo_view import FleetFrame, LiveTerminal, cluster_row, pod_row, render_summary, render_table

REPORT = {
    "id": "us-east-1",
    "fresh": True,
    "age_s": 0.3,
    "draining": False,
    "router_drain": False,
    "capacity_type": "on-demand",
    "cost_per_gpu_hour": 4.0,
    "ejected_for_s": 0.0,
    "requests_total": 17,
    "rate_rps": 1.5,
    "models": {
        BASE_MODEL: {
            "ready_pods": 3,
            "queued": 2,
            "running": 5,
            "headroom_requests": 40,
            "est_ttft_ms": 95.0,
        }
    },
}
STATE = {
    "num_requests_waiting": 1,
    "num_requests_running": 4,
    "kv_cache_usage": 0.125,
    "lora": {"resident": ["sql-lora"]},
    "counters": {"request_success_total": {"stop": 3, "length": 6}},
}


def _frame() -> FleetFrame:
    plan = DEFAULT_FLEET[0]
    row = cluster_row(plan, REPORT)
    row.pods = [pod_row(f"{plan.cluster_id}/0", "vllm", plan.pods[0].profile, STATE)]
    row.pods.append(pod_row(f"{plan.cluster_id}/1", "vllm", plan.pods[1].profile, None))
    silent = cluster_row(DEFAULT_FLEET[1], None)
    return FleetFrame(uptime_s=65, clusters=[row, silent], load_line=LoadStats(sent=3, ok=3).line(2.0))


def test_rows_take_the_router_report_and_the_pod_state() -> None:
    f = _frame()
    c = f.clusters[0]
    assert (c.ready_pods, c.queued, c.running, c.headroom, c.routed) == (3, 2, 5, 40, 17)
    assert c.state == "fresh 0.3s"
    p = c.pods[0]
    assert (p.up, p.waiting, p.running, p.requests, p.resident) == (True, 1, 4, 9, ["sql-lora"])
    assert not c.pods[1].up
    assert f.clusters[1].state == "no report"
    drained = cluster_row(DEFAULT_FLEET[0], {**REPORT, "router_drain": True})
    assert drained.state == "draining"
    stale = cluster_row(DEFAULT_FLEET[0], {**REPORT, "fresh": False, "age_s": 12})
    assert stale.state.startswith("STALE")


def test_table_shows_clusters_pods_and_load() -> None:
    text = "\n".join(render_table(_frame(), "http://127.0.0.1:8000"))
    assert "http://127.0.0.1:8000" in text and "00:01:05" in text
    assert "us-east-1" in text and "3/3" in text and "on-demand" in text and "4.00" in text
    assert "12.5" in text and "sql-lora" in text  # KV % and resident adapter of pod 0
    assert "DOWN" in text  # pod 1 did not answer
    assert "eu-west-1" in text and "no report" in text
    assert "load 2 req/s: sent 3 ok 3" in text


def test_summary_is_one_line_per_sample() -> None:
    line = render_summary(_frame())
    assert "\n" not in line
    assert line.startswith("[00:01:05]")
    assert "us-east-1 3/3 ready q=2 run=5 routed=17" in line and "pod requests=9" in line


def test_terminal_redraws_in_place_over_the_previous_frame() -> None:
    out = io.StringIO()
    term = LiveTerminal(out)
    term.draw(["a", "b", "c"])
    term.draw(["d"])
    text = out.getvalue()
    assert text.startswith("\x1b[J" + "a\nb\nc\n")
    assert text.endswith("\x1b[3F\x1b[J" + "d\n")  # up over the three lines, clear, draw
