"""`GET /` on a cluster gateway: one row per pod, as this gateway sees it (no scripts, no assets).

The router's status page shows clusters and per-model aggregates (what agents report); the pods
themselves are only known here. Each row: state, engine, what the last scrape said (queue, running,
KV use, adapters in use), what this gateway sent (in flight, total) and how old the metrics are.
Pods are named as in `/metrics` (their discovery name), not by address.
"""

from __future__ import annotations

from html import escape

from cluster_gateway.pool import PodState

REFRESH_S = 2

_STYLE = """
body{font:13px/1.35 system-ui,-apple-system,"Segoe UI",sans-serif;margin:1.2em 1.5em;color:#222}
h1{font-size:1.25em;margin:0 0 .3em}table{border-collapse:collapse;margin:.5em 0}
th,td{border:1px solid #d5d5d5;padding:.2em .5em;text-align:right;white-space:nowrap;
font-variant-numeric:tabular-nums}th{background:#f3f3f3;vertical-align:bottom}
td.l,th.l{text-align:left}td.adapters{max-width:26em;overflow:hidden;text-overflow:ellipsis}
.bad{color:#b00;font-weight:600}.warn{color:#a60}.ok{color:#070}.muted{color:#777}
"""

_LEGEND = (
    "queued / running: requests waiting in / running on the engine at the last scrape · KV used: share "
    "of KV-cache blocks in use · in flight: requests this gateway is forwarding to the pod now · sent: "
    "requests this gateway process sent since start · metrics age: seconds since the last good scrape · "
    "adapters: bold = requests for it running or waiting on the pod now, plain = listed by the pod"
)


def _state(pod: PodState, now: float) -> str:
    if pod.ejected(now):
        return f'<span class="bad">ejected {pod.ejected_until - now:.0f} s</span>'
    if pod.stale:
        return (
            '<span class="bad">stale</span>'
            if pod.consecutive_failures
            else '<span class="warn">no metrics yet</span>'
        )
    return '<span class="ok">ready</span>'


def _adapters(pod: PodState) -> str:
    m = pod.metrics
    loaded = set(m.running_adapters | m.waiting_adapters) if m else set()
    names = sorted(set(pod.adapters) | loaded, key=lambda a: (a not in loaded, a))
    if not names:
        return '<td class="l adapters muted">none</td>'
    text = ", ".join(f"<b>{escape(a)}</b>" if a in loaded else escape(a) for a in names)
    return f'<td class="l adapters" title="{escape(", ".join(names))}">{text}</td>'


def _row(pod: PodState, now: float) -> str:
    m = pod.metrics
    kv = "-" if m is None or m.kv_usage is None else f"{100 * m.kv_usage:.0f}"
    age = "-" if m is None or not m.scraped_at else f"{max(0.0, now - m.scraped_at):.1f}"
    engine = (m.engine if m else pod.endpoint.engine) or "?"
    return (
        f'<tr><td class="l">{escape(pod.endpoint.name)}</td><td class="l">{_state(pod, now)}</td>'
        f'<td class="l">{escape(str(engine))}</td><td class="l">{escape(", ".join(sorted(pod.base_models)) or "-")}</td>'
        f"<td>{m.waiting if m else '-'}</td><td>{m.running if m else '-'}</td><td>{kv}</td>"
        f"<td>{pod.inflight}</td><td>{pod.dispatched_total:,}</td><td>{age}</td>{_adapters(pod)}</tr>"
    )


def render_pods(pods: list[PodState], now: float) -> str:
    """`now` is `time.monotonic()`, the clock of scrapes and ejections."""
    ready = sum(1 for p in pods if not p.stale and not p.ejected(now))
    rows = "\n".join(_row(p, now) for p in sorted(pods, key=lambda p: p.endpoint.name))
    rows = rows or '<tr><td colspan="11" class="l muted">No pods discovered yet.</td></tr>'
    return f"""<!doctype html>
<html lang="en"><head><meta charset="utf-8"><meta http-equiv="refresh" content="{REFRESH_S}">
<title>Fleetgate cluster gateway</title><style>{_STYLE}</style></head><body>
<h1>Fleetgate cluster gateway <span class="muted">· pods ready {ready} / {len(pods)}</span></h1>
<p class="muted">Refreshes every {REFRESH_S} s · <a href="/metrics">metrics</a> · <a href="/ready">ready</a></p>
<table><tr><th class="l">pod</th><th class="l">state</th><th class="l">engine</th><th class="l">base model</th>
<th>queued</th><th>running</th><th>KV used<br>(%)</th><th>in flight</th><th>sent</th>
<th>metrics<br>age (s)</th><th class="l">LoRA adapters<br>(<b>in use</b>, listed)</th></tr>
{rows}
</table><p class="muted">{escape(_LEGEND)}</p></body></html>
"""
