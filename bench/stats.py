"""Percentiles and per-policy summaries, computed the same way for every policy in a run."""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass

from bench.loadgen import Result


def percentile(values: Sequence[float], q: float) -> float:
    """Nearest-rank percentile (q in 0..100); NaN for no data."""
    if not values:
        return math.nan
    s = sorted(values)
    k = max(0, min(len(s) - 1, math.ceil(q / 100 * len(s)) - 1))
    return s[k]


@dataclass(slots=True)
class Summary:
    policy: str
    requests: int
    errors: int
    ttft_p50: float
    ttft_p90: float
    ttft_p99: float
    ttft_mean: float
    e2e_p50: float
    e2e_p99: float
    output_tok_per_s: float
    utilisation_cv: float  # coefficient of variation of per-pod busy-ness (lower = more even GPU use)


def summarise(policy: str, results: Sequence[Result], wall_s: float, utilisation_cv: float) -> Summary:
    ok = [r for r in results if r.ok]
    ttft = [r.ttft_s for r in ok if r.ttft_s is not None]
    e2e = [r.e2e_s for r in ok]
    toks = sum(r.output_tokens for r in ok)
    return Summary(
        policy=policy,
        requests=len(results),
        errors=len(results) - len(ok),
        ttft_p50=percentile(ttft, 50),
        ttft_p90=percentile(ttft, 90),
        ttft_p99=percentile(ttft, 99),
        ttft_mean=statistics.fmean(ttft) if ttft else math.nan,
        e2e_p50=percentile(e2e, 50),
        e2e_p99=percentile(e2e, 99),
        output_tok_per_s=toks / wall_s if wall_s > 0 else math.nan,
        utilisation_cv=utilisation_cv,
    )


def coefficient_of_variation(values: Sequence[float]) -> float:
    if not values:
        return math.nan
    mean = statistics.fmean(values)
    if mean == 0:
        return 0.0
    return statistics.pstdev(values) / mean
