"""A minimal Prometheus histogram/counter pair that renders straight to exposition text.

prometheus_client registries are process-global and slower to render; a pod needs a few
histograms rendered hundreds of times a second across a fleet, so this keeps plain lists.
"""

from __future__ import annotations

from bisect import bisect_left


def fmt(v: float) -> str:
    """Prometheus float formatting (`1.0`, `0.25`, `+Inf`)."""
    if v == float("inf"):
        return "+Inf"
    return repr(float(v))


class Histogram:
    __slots__ = ("_cache", "bounds", "count", "counts", "sum")

    def __init__(self, bounds: tuple[float, ...]) -> None:
        self.bounds = bounds
        self.counts = [0] * (len(bounds) + 1)  # last = above every bound
        self.sum = 0.0
        self.count = 0
        self._cache: dict[str, tuple[str, int, list[str]]] = {}  # name -> (labels, count, lines)

    def observe(self, value: float, n: int = 1) -> None:
        self.counts[bisect_left(self.bounds, value)] += n
        self.sum += value * n
        self.count += n

    def quantile(self, q: float) -> float:
        """Bucket-upper-bound estimate (for the admin state and the bench)."""
        if self.count == 0:
            return 0.0
        target = q * self.count
        acc = 0
        for i, c in enumerate(self.counts):
            acc += c
            if acc >= target:
                return self.bounds[i] if i < len(self.bounds) else float("inf")
        return float("inf")

    def render(self, name: str, help_text: str, labels: str, out: list[str]) -> None:
        """Append HELP/TYPE and the cumulative buckets; `labels` is `k="v",...` (may be empty).

        The text is kept until the next observation: most histograms (TTFT, e2e...) change only
        when a request starts or ends, far less often than the pod is scraped.
        """
        c = self._cache.get(name)
        if c is not None and c[0] == labels and c[1] == self.count:
            out.extend(c[2])
            return
        lines: list[str] = [f"# HELP {name} {help_text}", f"# TYPE {name} histogram"]
        sep = "," if labels else ""
        acc = 0
        for b, n in zip(self.bounds, self.counts, strict=False):
            acc += n
            lines.append(f'{name}_bucket{{{labels}{sep}le="{fmt(b)}"}} {fmt(acc)}')
        lines.append(f'{name}_bucket{{{labels}{sep}le="+Inf"}} {fmt(self.count)}')
        lb = f"{{{labels}}}" if labels else ""
        lines.append(f"{name}_count{lb} {fmt(self.count)}")
        lines.append(f"{name}_sum{lb} {fmt(self.sum)}")
        self._cache[name] = (labels, self.count, lines)
        out.extend(lines)


# Bucket bounds as vLLM v1 declares them (vllm/v1/metrics/loggers.py).
TTFT_BOUNDS = (
    0.001,
    0.005,
    0.01,
    0.02,
    0.04,
    0.06,
    0.08,
    0.1,
    0.25,
    0.5,
    0.75,
    1.0,
    2.5,
    5.0,
    7.5,
    10.0,
    20.0,
    40.0,
    80.0,
    160.0,
    640.0,
    2560.0,
)
ITL_BOUNDS = (
    0.01,
    0.025,
    0.05,
    0.075,
    0.1,
    0.15,
    0.2,
    0.3,
    0.4,
    0.5,
    0.75,
    1.0,
    2.5,
    5.0,
    7.5,
    10.0,
    20.0,
    40.0,
    80.0,
)
LATENCY_BOUNDS = (
    0.3,
    0.5,
    0.8,
    1.0,
    1.5,
    2.0,
    2.5,
    5.0,
    10.0,
    15.0,
    20.0,
    30.0,
    40.0,
    50.0,
    60.0,
    120.0,
    240.0,
    480.0,
    960.0,
    1920.0,
    7680.0,
)


def token_bounds(max_model_len: int) -> tuple[float, ...]:
    """vLLM's 1-2-5 series up to max_model_len, for per-request token-count histograms."""
    out: list[float] = []
    exp = 0
    while True:
        for m in (1, 2, 5):
            v = m * 10**exp
            if v > max_model_len:
                return tuple(out)
            out.append(float(v))
        exp += 1
