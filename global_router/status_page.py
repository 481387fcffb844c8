"""`GET /`: the fleet report as a small self-refreshing HTML page (no scripts, no external assets).

Written for an operator on call: one row per cluster (state, price, load, what the router sent there
and how it ended), one row per model a cluster serves (pods, queue, headroom, predicted TTFT, LoRA
adapters), every column with its unit, and a legend for the terms. Cells never wrap, so a row stays
one line at 1280 px (`tests/global_router/test_status_page_screenshot.py` looks at it in Chromium).
Pods are not listed one by one: agents report per-model aggregates, and each cluster gateway's own
`/metrics` has the per-pod series.
"""

from __future__ import annotations

from html import escape
from typing import Any

REFRESH_S = 2

_STYLE = """
body{font:13px/1.35 system-ui,-apple-system,"Segoe UI",sans-serif;margin:1.2em 1.5em;color:#222}
h1{font-size:1.25em;margin:0 0 .3em}h2{font-size:1.05em;margin:1.2em 0 .3em}
.summary{margin:.3em 0}.summary b{font-variant-numeric:tabular-nums}
table{border-collapse:collapse;margin:.3em 0 .6em}
th,td{border:1px solid #d5d5d5;padding:.2em .5em;text-align:right;white-space:nowrap;
font-variant-numeric:tabular-nums}
th{background:#f3f3f3;font-weight:600;vertical-align:bottom}td.l,th.l{text-align:left}
td.adapters{max-width:26em;overflow:hidden;text-overflow:ellipsis;text-align:left}
tr.first td{border-top:2px solid #bbb}
.bad{color:#b00;font-weight:600}.warn{color:#a60}.ok{color:#070}.muted{color:#777}
dl{display:grid;grid-template-columns:max-content 1fr;gap:.1em 1em;margin:.3em 0;color:#444}
dt{font-weight:600}dd{margin:0}
"""

_LEGEND = (
    (
        "state",
        "serving; stale: no report for staleAfterS (ranked last, still routed); draining; ejected "
        "for N s after consecutive failures",
    ),
    ("report age", "seconds since this cluster's last capacity report"),
    ("in flight", "requests this router replica is forwarding to the cluster right now"),
    ("req/s", "requests per second this replica sent there, averaged over the last {rate_window_s:g} s"),
    (
        "routed / ok / errors",
        "requests finished at the cluster since this replica started; errors = "
        "5xx or 429 after failover ran out, no cluster answered, or a stream cut mid-way",
    ),
    ("4xx", "client errors the cluster answered (bad request, unknown model), passed through"),
    ("pods ready / saturated", "pods with fresh metrics / of those, pods over the saturation thresholds"),
    ("headroom", "more concurrent requests the cluster estimates it can take for this model"),
    ("est. TTFT", "the cluster's predicted time to first token for a new request, in ms"),
    ("KV free", "mean share of KV-cache blocks free on the ready pods, in %"),
    (
        "tok/s per GPU",
        "generation throughput per GPU with every slot busy (what the cost ranking divides $/GPU-hour by)",
    ),
    ("adapters", "LoRA adapters: bold = loaded on some pod now, plain = loadable on demand"),
    (
        "failover retries left",
        "retries to another cluster the retry budget still allows: ratio x requests + minRetries "
        "- retries, over the last {retry_budget_window_s:g} s",
    ),
)


def _state(c: dict[str, Any]) -> str:
    if not c["fresh"]:
        return '<span class="bad">stale</span>'
    if c["draining"] or c["router_drain"]:
        who = "operator" if c["router_drain"] else "own config"
        return f'<span class="warn">draining ({who})</span>'
    if c["ejected_for_s"] > 0:
        return f'<span class="bad">ejected {c["ejected_for_s"]:.0f} s</span>'
    return '<span class="ok">serving</span>'


def _adapters(m: dict[str, Any]) -> str:
    resident = set(m.get("adapters_resident", ()))
    names = sorted(m.get("adapters", ()), key=lambda a: (a not in resident, a))
    if not names:
        return '<td class="adapters muted">none</td>'
    cells = ", ".join(f"<b>{escape(a)}</b>" if a in resident else escape(a) for a in names)
    title = f"loaded: {', '.join(sorted(resident)) or 'none'}; loadable: {', '.join(sorted(set(names) - resident)) or 'none'}"
    return f'<td class="adapters" title="{escape(title)}">{cells}</td>'


def _count(n: int, bad: bool = False) -> str:
    return f'<td class="bad">{n:,}</td>' if bad and n else f"<td>{n:,}</td>"


def _cluster_rows(clusters: list[dict[str, Any]]) -> str:
    rows = []
    for c in clusters:
        o = c.get("outcomes", {})
        rows.append(
            f'<tr><td class="l">{escape(c["id"])}</td><td class="l">{escape(c["region"])}</td>'
            f'<td class="l">{_state(c)}</td><td>{c["age_s"]:.1f}</td>'
            f'<td class="l">{escape(c["capacity_type"])}</td><td>{c["cost_per_gpu_hour"]:.2f}</td>'
            f"<td>{c['gpus']}</td><td>{c['inflight']}</td><td>{c['rate_rps']:.1f}</td>"
            f"{_count(o.get('routed', 0))}{_count(o.get('ok', 0))}{_count(o.get('errors', 0), bad=True)}"
            f"{_count(o.get('client_errors', 0))}</tr>"
        )
    return "\n".join(rows) or '<tr><td colspan="13" class="l muted">No cluster has reported yet.</td></tr>'


def _model_rows(clusters: list[dict[str, Any]]) -> str:
    rows = []
    for c in clusters:
        for i, (name, m) in enumerate(sorted(c["models"].items())):
            cls = ' class="first"' if i == 0 else ""
            rows.append(
                f'<tr{cls}><td class="l">{escape(c["id"]) if i == 0 else ""}</td>'
                f'<td class="l">{escape(name)}</td><td>{m["ready_pods"]} / {m["saturated_pods"]}</td>'
                f"<td>{m['queued']}</td><td>{m['running']}</td><td>{m['headroom_requests']}</td>"
                f"<td>{m['est_ttft_ms']:.0f}</td><td>{100 * m['kv_headroom']:.0f}</td>"
                f"<td>{m['gpu_tokens_per_s']:,.0f}</td>{_adapters(m)}</tr>"
            )
        if not c["models"]:
            rows.append(
                f'<tr class="first"><td class="l">{escape(c["id"])}</td>'
                '<td class="l muted" colspan="9">reports no models (no ready pod)</td></tr>'
            )
    return "\n".join(rows) or '<tr><td colspan="10" class="l muted">No models yet.</td></tr>'


def render_status(report: dict[str, Any]) -> str:
    router = report["router"]
    clusters = report["clusters"]
    totals = router.get("totals", {})
    windows = {
        "rate_window_s": router.get("rate_window_s", 10),
        "retry_budget_window_s": router.get("retry_budget_window_s", 10),
    }
    legend = "".join(f"<dt>{escape(k)}</dt><dd>{escape(v.format(**windows))}</dd>" for k, v in _LEGEND)
    fresh = sum(1 for c in clusters if c["fresh"])
    fresh_cls = "ok" if fresh else "bad"
    return f"""<!doctype html>
<html lang="en"><head><meta charset="utf-8"><meta http-equiv="refresh" content="{REFRESH_S}">
<meta name="viewport" content="width=device-width,initial-scale=1">
<title>Fleetgate global router</title><style>{_STYLE}</style></head><body>
<h1>Fleetgate global router <span class="muted">· region {escape(str(router.get("region", "")))}
· replica {escape(str(router.get("replica", "")))}</span></h1>
<p class="summary">clusters fresh: <b class="{fresh_cls}">{fresh} / {len(clusters)}</b> ·
requests since start: <b>{totals.get("requests", 0):,}</b> (routed <b>{totals.get("routed", 0):,}</b>,
errors <b>{totals.get("errors", 0):,}</b>, refused by the router <b>{totals.get("refused", 0):,}</b>,
of which rate-limited <b>{totals.get("rate_limited", 0):,}</b>) ·
failover retries left: <b>{int(router.get("retry_budget_available", 0))}</b> ·
rate limits: <b>{escape(str(router.get("rate_limiter", "")))}</b> ·
fleet view: <b>{escape(str(router.get("fleet_view", "")))}</b></p>
<p class="summary muted">Refreshes every {REFRESH_S} s · <a href="/fleet">JSON</a> ·
<a href="/metrics">metrics</a></p>
<h2>Clusters</h2>
<table><tr><th class="l">cluster</th><th class="l">region</th><th class="l">state</th>
<th>report age<br>(s)</th><th class="l">capacity</th><th>$ per<br>GPU-hour</th><th>GPUs</th>
<th>in flight</th><th>req/s<br>({windows["rate_window_s"]:g} s)</th><th>routed</th><th>ok</th><th>errors</th>
<th>4xx</th></tr>
{_cluster_rows(clusters)}
</table>
<h2>Models per cluster</h2>
<table><tr><th class="l">cluster</th><th class="l">model</th><th>pods ready<br>/ saturated</th>
<th>queued</th><th>running</th><th>headroom<br>(requests)</th><th>est. TTFT<br>(ms)</th>
<th>KV free<br>(%)</th><th>tok/s<br>per GPU</th><th class="l">LoRA adapters<br>(<b>loaded</b>, loadable)</th></tr>
{_model_rows(clusters)}
</table>
<h2>Legend</h2><dl>{legend}</dl>
</body></html>
"""
