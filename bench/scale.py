"""The control plane's cost curves at fleet scale, in one run (`fleetgate bench scale [--quick]`).

Per pool size (10 / 100 / 1,000 / 5,000 pods): pick µs (`pick_bench`, `latency` profile, 2k-token
prompts over shared prefixes; two-stage picks on, and off for the cost before them), the agent's
`build_report` ms; the scrape figures (scrape CPU per pod, scrapes/s per core, pods kept fresh at
the default interval) come from `bench.scale_scrape` when that module is present. Per fleet size
(3 / 30 / 300 clusters): router CPU per capacity report, a replica's CPU per Redis notice, and
selection µs (with the per-model candidate index and short list, and without: every cluster
scanned and scored). Then the prefix index's measured bytes per block at 1,000 pods.

Every figure is CPU time of the operation (`thread_time`), so it carries over from a loaded
machine; the table says how loaded it was. Writes bench/results/scale[_quick].md and a log-log
plot scale[_quick].png next to it.

    python -m bench.scale [--quick] [--out PATH] [--no-plots]
"""

from __future__ import annotations

import argparse
import importlib
import importlib.util
import os
import random
import statistics
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench import pick_bench, prefix_memory, report, scale_router
from common.config.gateway import Scheduling, TwoStage

PODS = (10, 100, 1000, 5000)
CLUSTERS = (3, 30, 300)
SCRAPE_MODULE = "bench.scale_scrape"  # the scrape section: `rows(quick) -> list[Row]`, `table(rows)`


@dataclass
class PodRow:
    pods: int
    pick_us: float  # CPU p50, two-stage picks (defaults)
    pick_p99_us: float
    pick_all_us: float  # CPU p50, every pod scored (twoStage.minPods 0)
    build_ms: float  # build_report, CPU median


def _pick(n: int, decisions: int, two_stage: TwoStage) -> pick_bench.Row:
    return pick_bench.run_one(n, "latency", decisions, scheduling=Scheduling(two_stage=two_stage))


def _build_ms(n: int, reps: int) -> float:
    from bench.capacity_bench import _pool
    from cluster_gateway.agent.aggregate import build_report
    from common.config.gateway import Discovery, GatewaySpec, Saturation, StaticDiscovery

    spec = GatewaySpec(discovery=Discovery(static=StaticDiscovery()))
    pool = _pool(n, random.Random(n))
    sat = Saturation()
    times = []
    for seq in range(reps):
        c0 = time.thread_time_ns()
        build_report(spec, pool, seq + 1, sat)
        times.append((time.thread_time_ns() - c0) / 1e6)
    return statistics.median(times)


def pod_rows(quick: bool) -> list[PodRow]:
    decisions = 300 if quick else 1500
    out = []
    for n in PODS:
        on = _pick(n, decisions, TwoStage())
        off = on if n <= TwoStage().min_pods else _pick(n, max(100, decisions // 3), TwoStage(min_pods=0))
        out.append(PodRow(n, on.cpu_p50_us, on.cpu_p99_us, off.cpu_p50_us, _build_ms(n, 5 if quick else 15)))
    return out


@dataclass
class ClusterRow:
    clusters: int
    after: scale_router.RouterRow
    before: scale_router.RouterRow


def cluster_rows(quick: bool) -> list[ClusterRow]:
    requests = 500 if quick else 2000
    return [
        ClusterRow(n, scale_router.run_one(n, requests), scale_router.run_one(n, requests, indexed=False))
        for n in CLUSTERS
    ]


def scrape_section(quick: bool) -> tuple[str, list[Any]]:
    """The scrape figures when `bench.scale_scrape` is installed, else a note saying so."""
    if importlib.util.find_spec(SCRAPE_MODULE) is None:
        return (f"_Scrape section skipped: `{SCRAPE_MODULE}` is not on this branch._", [])
    mod = importlib.import_module(SCRAPE_MODULE)
    rows = list(mod.rows(quick))
    return mod.table(rows), rows


def _load() -> str:
    try:
        one, five, _ = os.getloadavg()
    except OSError:
        return "load average unknown"
    return f"load average {one:.1f} (1 min) / {five:.1f} (5 min) on {os.cpu_count()} cores"


def render(
    pods: list[PodRow], clusters: list[ClusterRow], scrape: str, memory: prefix_memory.MemoryRow
) -> str:
    pod_table = report.markdown_table(
        ["pods", "pick CPU p50 µs", "pick CPU p99 µs", "pick p50, every pod scored", "build_report ms"],
        [
            [
                str(r.pods),
                f"{r.pick_us:.0f}",
                f"{r.pick_p99_us:.0f}",
                f"{r.pick_all_us:.0f}",
                f"{r.build_ms:.2f}",
            ]
            for r in pods
        ],
        right=range(5),
    )
    cluster_table = report.markdown_table(
        [
            "clusters",
            "router CPU µs / report",
            "replica CPU µs / Redis notice",
            "select p50 µs",
            "select p99 µs",
            "scored",
            "select p50, every cluster scored",
        ],
        [
            [
                str(r.clusters),
                f"{r.after.report_cpu_us:.0f}",
                f"{r.after.notice_cpu_us:.0f}",
                f"{r.after.select_p50_us:.0f}",
                f"{r.after.select_p99_us:.0f}",
                str(r.after.candidates),
                f"{r.before.select_p50_us:.0f}",
            ]
            for r in clusters
        ],
        right=range(7),
    )
    return "\n\n".join(
        [
            f"CPU time per operation (thread_time); {_load()} at the end of the run.",
            "### Tier 1, by pool size\n\n" + pod_table,
            "### Scrapes\n\n" + scrape,
            "### Tier 2, by fleet size\n\n" + cluster_table,
            "### Prefix index memory\n\n" + prefix_memory.table([memory]),
        ]
    )


def plot(pods: list[PodRow], clusters: list[ClusterRow], scrape_rows: list[Any], path: Path) -> Path:
    from bench.plots import _plt

    plt = _plt()
    fig, (left, right) = plt.subplots(1, 2, figsize=(12, 4.5))
    xs = [r.pods for r in pods]
    left.plot(xs, [r.pick_us for r in pods], "o-", label="pick CPU p50 µs (two-stage)")
    left.plot(xs, [r.pick_all_us for r in pods], "o--", label="pick CPU p50 µs (every pod scored)")
    left.plot(xs, [r.build_ms * 1000 for r in pods], "s-", label="build_report µs")
    by_measure: dict[str, list[tuple[int, float]]] = {}
    for row in scrape_rows:
        if getattr(row, "pods", None):
            by_measure.setdefault(f"{row.measure} ({row.unit})", []).append((row.pods, row.value))
    for name, pts in by_measure.items():
        if len(pts) > 1:
            pts.sort()
            left.plot([p for p, _ in pts], [v for _, v in pts], "^:", label=name)
    left.set_xlabel("pods in the pool")
    left.set_title("Tier 1 (cluster gateway)")
    cx = [r.clusters for r in clusters]
    right.plot(
        cx, [r.after.select_p50_us for r in clusters], "o-", label="select p50 µs (index + short list)"
    )
    right.plot(cx, [r.before.select_p50_us for r in clusters], "o--", label="select p50 µs (every cluster)")
    right.plot(cx, [r.after.report_cpu_us for r in clusters], "s-", label="router CPU µs per report")
    right.plot(cx, [r.after.notice_cpu_us for r in clusters], "d-", label="replica CPU µs per notice")
    right.set_xlabel("clusters in the fleet")
    right.set_title("Tier 2 (global router)")
    for ax in (left, right):
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_ylabel("CPU per operation")
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="fleetgate bench scale", description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="fewer decisions and requests per size")
    report.add_output_options(ap, "scale", "the plot goes next to it as .png")
    args = ap.parse_args(argv)
    print("[scale] picks and build_report by pool size", file=sys.stderr, flush=True)
    pods = pod_rows(args.quick)
    print("[scale] scrapes", file=sys.stderr, flush=True)
    scrape, scrape_rows = scrape_section(args.quick)
    print("[scale] router by fleet size", file=sys.stderr, flush=True)
    clusters = cluster_rows(args.quick)
    print("[scale] prefix index memory", file=sys.stderr, flush=True)
    memory = prefix_memory.measure(1000, 50_000 if args.quick else 200_000)
    text = render(pods, clusters, scrape, memory)
    out = report.output_path(args.out, "scale", args.quick)
    if not args.no_plots:
        png = plot(pods, clusters, scrape_rows, out.with_suffix(".png"))
        text += f"\n\n![cost curves]({png.name})"
    report.write_results(out, "scale", report.module_command("bench.scale", argv), text)
    print(text)
    print(f"\nwrote {out}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
