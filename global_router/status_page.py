"""`GET /`: the fleet report as a small self-refreshing HTML page (no scripts, no external assets)."""

from __future__ import annotations

from html import escape
from typing import Any

REFRESH_S = 2

_STYLE = """
body{font:14px/1.4 system-ui,sans-serif;margin:1.5em;color:#222}
h1{font-size:1.3em}table{border-collapse:collapse;margin:.5em 0 1.5em}
th,td{border:1px solid #ccc;padding:.25em .6em;text-align:right}th{background:#f3f3f3}
td.l,th.l{text-align:left}.bad{color:#b00;font-weight:600}.ok{color:#070}.muted{color:#777}
"""


def _state(c: dict[str, Any]) -> str:
    if not c["fresh"]:
        return '<span class="bad">stale</span>'
    if c["draining"] or c["router_drain"]:
        return '<span class="bad">draining</span>'
    if c["ejected_for_s"] > 0:
        return f'<span class="bad">ejected {c["ejected_for_s"]:.1f}s</span>'
    return '<span class="ok">serving</span>'


def render_status(report: dict[str, Any]) -> str:
    router = report["router"]
    rows = []
    for c in report["clusters"]:
        models = c["models"] or {"—": None}
        for i, (name, m) in enumerate(models.items()):
            head = (
                f'<td class="l">{escape(c["id"])}</td><td class="l">{escape(c["region"])}</td>'
                f"<td>{_state(c)}</td><td>{c['age_s']:.1f}s</td>"
                f"<td>{escape(c['capacity_type'])}</td><td>${c['cost_per_gpu_hour']:.2f}</td>"
                f"<td>{c['inflight']}</td><td>{c['rate_rps']:.1f}</td>"
                if i == 0
                else '<td colspan="8"></td>'
            )
            if m is None:
                cells = '<td class="l muted">no models</td>' + "<td></td>" * 6
            else:
                cells = (
                    f'<td class="l">{escape(name)}</td><td>{m["ready_pods"]}</td>'
                    f"<td>{m['headroom_requests']}</td><td>{m['queued']}</td>"
                    f"<td>{m['est_ttft_ms']:.0f}</td><td>{m['kv_headroom']:.2f}</td>"
                    f"<td>{m['gpu_tokens_per_s']:.0f}</td>"
                )
            rows.append(f"<tr>{head}{cells}</tr>")
    body = "\n".join(rows) or '<tr><td colspan="15" class="l muted">No cluster has reported yet.</td></tr>'
    return f"""<!doctype html>
<html lang="en"><head><meta charset="utf-8"><meta http-equiv="refresh" content="{REFRESH_S}">
<title>Fleetgate global router</title><style>{_STYLE}</style></head><body>
<h1>Fleetgate global router <span class="muted">({escape(str(router.get("region", "")))})</span></h1>
<p>Rate limits: <b>{escape(str(router.get("rate_limiter", "")))}</b> ·
fleet view: <b>{escape(str(router.get("fleet_view", "")))}</b> ·
fresh clusters: <b>{sum(1 for c in report["clusters"] if c["fresh"])}</b> / {len(report["clusters"])} ·
retry budget left: {router.get("retry_budget_available", 0)} · refreshes every {REFRESH_S}s ·
<a href="/fleet">JSON</a> · <a href="/metrics">metrics</a></p>
<table><tr><th class="l">cluster</th><th class="l">region</th><th>state</th><th>report age</th>
<th>capacity</th><th>$/GPU-h</th><th>in flight</th><th>req/s</th><th class="l">model</th><th>ready pods</th>
<th>headroom</th><th>queued</th><th>est TTFT ms</th><th>KV free</th><th>tok/s per GPU</th></tr>
{body}
</table></body></html>
"""
