"""The routing headline: one table of scenarios x (round-robin, best peer, GIE reference, `latency`).

Built from the JSON each `fleetgate bench routing --scenario NAME` run leaves next to its markdown
(`bench/results/routing_<scenario>[_quick].json`), so the headline is exactly the per-scenario tables
condensed, never typed in. "Best tuned peer" is taken per percentile: the lowest p90 among the
`@tuned` peer rows and, separately, the lowest p99 (which may be another peer), so `latency` is held
to the strictest comparison. The same for the peers on their defaults.

    python -m bench.routing_headline [--quick] [--results DIR]
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from bench.report import RESULTS_DIR
from bench.routing import TUNED
from bench.routing_scenarios import SCENARIOS

Row = Mapping[str, Any]


def _ok(row: Row) -> bool:
    return not row.get("failure") and not math.isnan(float(row.get("ttft_p90", math.nan)))


def best(policies: Mapping[str, Row], tuned: bool, key: str) -> tuple[str, float] | None:
    """The peer row with the lowest `key` among tuned (or default) peer rows that ran cleanly."""
    rows = [
        (name, float(r[key]))
        for name, r in policies.items()
        if ":" in name and name.endswith(TUNED) == tuned and _ok(r)
    ]
    return min(rows, key=lambda x: x[1]) if rows else None


def _cell(policies: Mapping[str, Row], name: str) -> str:
    r = policies.get(name)
    if r is None or not _ok(r):
        return "n/a"
    return f"{r['ttft_p90']:.2f} / {r['ttft_p99']:.2f}"


def _peer_cell(policies: Mapping[str, Row], tuned: bool) -> str:
    b90, b99 = best(policies, tuned, "ttft_p90"), best(policies, tuned, "ttft_p99")
    if b90 is None or b99 is None:
        return "n/a"
    who = b90[0] if b90[0] == b99[0] else f"{b90[0]} / {b99[0]}"
    return f"{b90[1]:.2f} / {b99[1]:.2f} ({who.replace(TUNED, '')})"


def _gain(policies: Mapping[str, Row]) -> str:
    """`latency` against the best tuned peer, per percentile (-40% = 40% lower TTFT)."""
    lat = policies.get("latency")
    b90, b99 = best(policies, True, "ttft_p90"), best(policies, True, "ttft_p99")
    if lat is None or not _ok(lat) or b90 is None or b99 is None or b90[1] <= 0 or b99[1] <= 0:
        return "n/a"
    return f"{lat['ttft_p90'] / b90[1] - 1:+.0%} / {lat['ttft_p99'] / b99[1] - 1:+.0%}"


def table(records: Sequence[Mapping[str, Any]]) -> str:
    lines = [
        "| scenario | round-robin | best peer, defaults | best peer, tuned | GIE `reference` | `latency` "
        "| `latency` vs best tuned peer | machine load |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for rec in records:
        pol = rec["policies"]
        rows = [float(r.get("machine_load", math.nan)) for r in pol.values()]
        load = max([*rec.get("load_avg", [0.0]), *(x for x in rows if not math.isnan(x))])
        lines.append(
            f"| `{rec['scenario']}` | {_cell(pol, 'round-robin')} | {_peer_cell(pol, False)} "
            f"| {_peer_cell(pol, True)} | {_cell(pol, 'reference')} | {_cell(pol, 'latency')} | {_gain(pol)} "
            f"| {'loaded' if load > 2.5 else 'quiet'} ({load:.1f}) |"
        )
    lines += [
        "",
        "Cells are TTFT p90 / p99 in seconds (client-measured, streamed chats). Peer cells take the lowest "
        "p90 and the lowest p99 over that peer group's rows (named in brackets). `machine load` is the "
        "highest 1-minute load average any of that scenario's rows ran under (2 cores).",
    ]
    return "\n".join(lines) + "\n"


def detail(rec: Mapping[str, Any]) -> str:
    """One scenario's rows, compact: what RESULTS.md keeps per scenario (the full tables stay in
    bench/results/)."""
    lines = [
        f"`{rec['scenario']}` ({rec.get('requests', '?')} requests):",
        "",
        "| policy | TTFT p50 | p90 | p99 | mean | errors | requests per pod | machine load |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for name, r in rec["policies"].items():
        if not _ok(r):
            lines.append(f"| {name} | FAILED: {str(r.get('failure', ''))[:80]} | | | | | | |")
            continue
        pods = "/".join(str(n) for n in r.get("pod_requests", []))
        load = float(r.get("machine_load", math.nan))
        lines.append(
            f"| {name} | {r['ttft_p50']:.2f} | {r['ttft_p90']:.2f} | {r['ttft_p99']:.2f} | {r['ttft_mean']:.2f} "
            f"| {r['errors']} | {pods} | {'n/a' if math.isnan(load) else f'{load:.1f}'} |"
        )
    return "\n".join(lines) + "\n"


def load(results: Path, quick: bool) -> list[dict[str, Any]]:
    out = []
    for name in SCENARIOS:
        path = results / f"routing_{name}{'_quick' if quick else ''}.json"
        if path.exists():
            out.append(json.loads(path.read_text()))
    return out


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        prog="python -m bench.routing_headline", description=__doc__.split("\n\n")[0]
    )
    ap.add_argument("--quick", action="store_true", help="the --quick runs' results")
    ap.add_argument("--results", default=str(RESULTS_DIR))
    ap.add_argument("--detail", action="store_true", help="also every scenario's rows")
    args = ap.parse_args(argv)
    records = load(Path(args.results), args.quick)
    if not records:
        print(f"no routing_*{'_quick' if args.quick else ''}.json under {args.results}", file=sys.stderr)
        return 1
    print(table(records), end="")
    if args.detail:
        for rec in records:
            print("\n" + detail(rec), end="")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
