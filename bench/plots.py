"""PNG plots for the global and overhead benches (matplotlib, Agg backend: no display needed).

The binning helpers are pure so they can be tested without matplotlib; drawing imports it lazily.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any


@dataclass(slots=True)
class SecondBin:
    second: int  # whole seconds since the run started (by request start time)
    ok: int = 0
    failed: int = 0
    by_cluster: dict[str, int] = field(default_factory=dict)  # answered 200, per serving cluster


def per_second(results: Sequence[tuple[float, float, int, str]], t0: float) -> list[SecondBin]:
    """(start, end, status, cluster) per request -> one bin per second from t0, gaps included."""
    if not results:
        return []
    last = max(int(s - t0) for s, _, _, _ in results)
    bins = [SecondBin(i) for i in range(max(0, last) + 1)]
    for s, _, status, cluster in results:
        b = bins[max(0, int(s - t0))]
        if status == 200:
            b.ok += 1
            b.by_cluster[cluster] = b.by_cluster.get(cluster, 0) + 1
        else:
            b.failed += 1
    return bins


def _plt() -> Any:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def failover_timeline(bins: Sequence[SecondBin], kill_s: float, path: Path) -> Path:
    """Top: requests ok/failed per second; bottom: each cluster's share of answered requests."""
    plt = _plt()
    xs = [b.second for b in bins]
    clusters = sorted({c for b in bins for c in b.by_cluster})
    fig, (top, bottom) = plt.subplots(2, 1, figsize=(8, 5.5), sharex=True)
    bar = {"width": 0.9, "align": "edge"}  # bin [s, s+1) drawn from s, so the kill line lands in it
    top.bar(xs, [b.ok for b in bins], color="tab:green", label="ok (200)", **bar)
    top.bar(xs, [b.failed for b in bins], bottom=[b.ok for b in bins], color="tab:red", label="failed", **bar)
    top.set_ylabel("requests started / s")
    top.set_title("Failover: one cluster SIGKILLed under load (router view from the client)")
    bottom_acc = [0.0] * len(bins)
    for c in clusters:
        share = [b.by_cluster.get(c, 0) / b.ok if b.ok else 0.0 for b in bins]
        bottom.bar(xs, share, bottom=bottom_acc, label=c, **bar)
        bottom_acc = [a + s for a, s in zip(bottom_acc, share, strict=True)]
    bottom.set_ylabel("share of ok requests")
    bottom.set_xlabel("second of the run (request start)")
    for ax in (top, bottom):
        ax.axvline(kill_s, color="black", linestyle="--", linewidth=1)
        ax.grid(True, axis="y", alpha=0.3)
        ax.legend(loc="upper right", fontsize=8)
    top.annotate("kill", (kill_s, top.get_ylim()[1] * 0.95), xytext=(4, 0), textcoords="offset points")
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path


def cost_bars(
    clusters: Sequence[str], shaped: Mapping[str, int], baseline: Mapping[str, int], path: Path
) -> Path:
    """Batch tokens served per cluster, shaped vs cost-blind baseline, side by side."""
    plt = _plt()
    fig, ax = plt.subplots(figsize=(7, 4))
    xs = list(range(len(clusters)))
    w = 0.38
    ax.bar([x - w / 2 for x in xs], [shaped.get(c, 0) for c in clusters], w, label="shaped (batch class)")
    ax.bar(
        [x + w / 2 for x in xs], [baseline.get(c, 0) for c in clusters], w, label="baseline (cost weight 0)"
    )
    ax.set_xticks(xs, list(clusters))
    ax.set_ylabel("batch completion tokens")
    ax.set_title("Where batch tokens were served")
    ax.grid(True, axis="y", alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path


def latency_cdfs(panels: Mapping[str, Mapping[str, Sequence[float]]], path: Path, title: str) -> Path:
    """One panel per measurement (e.g. non-streaming, streaming TTFB); one CDF line per path, in ms."""
    plt = _plt()
    from matplotlib.ticker import FormatStrFormatter

    n = max(1, len(panels))
    fig, axes = plt.subplots(1, n, figsize=(6 * n, 4), squeeze=False)
    for ax, (name, series) in zip(axes[0], panels.items(), strict=False):
        for label, values in series.items():
            v = sorted(x * 1e3 for x in values)
            if v:
                ax.plot(v, [(i + 1) / len(v) for i in range(len(v))], label=f"{label} (n={len(v)})")
        ax.set_xscale("log")
        ax.xaxis.set_major_formatter(FormatStrFormatter("%g"))
        ax.xaxis.set_minor_formatter(FormatStrFormatter("%g"))
        ax.set_xlabel("latency (ms, log scale)")
        ax.set_ylabel("fraction of requests")
        ax.set_title(name)
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=8)
    fig.suptitle(title)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path
