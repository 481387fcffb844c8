"""One `/metrics` for a gateway's whole process group, over the existing pool feed.

With `--workers N` every process serves requests and counts them in its own registry, and a
scrape lands on whichever process the kernel picks. So that every scrape shows the whole gateway:
- each worker ships its counter and histogram samples (cumulative values, not deltas: a lost or
  repeated report cannot skew them) to the gateway process about once a second
  (`SHIP_EVERY_TICKS`), and at once when it needs an aggregate;
- the gateway process renders its own registry with every worker's latest samples added
  (`MergedRegistry`): same name and labels → summed; a series only a worker has → added. Gauges
  are the gateway process's own: the pool gauges (in flight, stale, ejected) already count every
  process through the feed, and the admission-queue length adds the workers' queues;
- a worker asked for `/metrics` sets `want_metrics` in its next report and serves the body the
  gateway process sends back in its next snapshot (about two feed ticks, 50 ms, plus a render).
A worker that exits keeps its last totals in the sum (`retire`), so counters never go backwards
while the supervisor restarts it; per-pod series of a pod that left the pool are dropped from
the shipped samples too. Values are at most one shipping interval (~1 s) old.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator

from prometheus_client.metrics_core import Metric
from prometheus_client.registry import CollectorRegistry
from prometheus_client.samples import Sample

__all__ = ["SHIP_EVERY_TICKS", "MergedRegistry", "ProcessGroupMetrics", "ShippedSample", "counter_samples"]

SHIP_EVERY_TICKS = 40  # x feed TICK_S (25 ms): ~1 s
ShippedSample = tuple[str, list[tuple[str, str]], float]  # sample name, sorted labels, value
_Key = tuple[str, tuple[tuple[str, str], ...]]
_SUMMED = ("counter", "histogram")
_SUFFIXES = {"counter": ("_total",), "histogram": ("_bucket", "_count", "_sum")}


def counter_samples(registry: CollectorRegistry) -> list[ShippedSample]:
    """What a worker ships: every counter and histogram sample of its registry (no `_created`)."""
    out: list[ShippedSample] = []
    for family in registry.collect():
        if family.type not in _SUMMED:
            continue
        for s in family.samples:
            if not s.name.endswith("_created"):
                out.append((s.name, sorted(s.labels.items()), s.value))
    return out


class ProcessGroupMetrics:
    """The gateway process's view of its workers' samples: the latest per live worker, plus the
    totals of workers that exited."""

    def __init__(self) -> None:
        self._live: dict[int, dict[_Key, float]] = {}
        self._retired: dict[_Key, float] = {}

    def update(self, worker: int, samples: Iterable[ShippedSample]) -> None:
        self._live[worker] = {
            (name, tuple((k, v) for k, v in labels)): value for name, labels, value in samples
        }

    def retire(self, worker: int) -> None:
        for key, value in self._live.pop(worker, {}).items():
            self._retired[key] = self._retired.get(key, 0.0) + value

    def prune(self, keep: Callable[[dict[str, str]], bool]) -> None:
        """Drop retired series `keep` rejects (a departed pod's); live ones are pruned by their worker."""
        self._retired = {k: v for k, v in self._retired.items() if keep(dict(k[1]))}

    def totals(self) -> dict[_Key, float]:
        out = dict(self._retired)
        for samples in self._live.values():
            for key, value in samples.items():
                out[key] = out.get(key, 0.0) + value
        return out


def _order(name: str, labels: tuple[tuple[str, str], ...]) -> tuple[object, ...]:
    """Histogram lines grouped by label set, buckets ascending, then _count and _sum."""
    rest = tuple(kv for kv in labels if kv[0] != "le")
    le = next((float(v) for k, v in labels if k == "le"), 0.0)
    return (rest, 0 if name.endswith("_bucket") else 1, le, name)


class MergedRegistry:
    """What the gateway process renders: its registry with the workers' samples added (anything
    with a `collect()` is what `generate_latest` needs)."""

    def __init__(
        self, registry: CollectorRegistry, group: ProcessGroupMetrics, keep: Callable[[dict[str, str]], bool]
    ) -> None:
        self.registry = registry
        self.group = group
        self.keep = keep

    def collect(self) -> Iterator[Metric]:
        extra = self.group.totals()
        by_name: dict[str, list[tuple[_Key, float]]] = {}
        for key, value in extra.items():
            by_name.setdefault(key[0], []).append((key, value))
        for family in self.registry.collect():
            if family.type not in _SUMMED or not extra:
                yield family
                continue
            merged = Metric(family.name, family.documentation, family.type, family.unit)
            seen: set[_Key] = set()
            for s in family.samples:
                key = (s.name, tuple(sorted(s.labels.items())))
                value = s.value
                if not s.name.endswith("_created"):
                    value += extra.get(key, 0.0)
                    seen.add(key)
                merged.samples.append(Sample(s.name, s.labels, value, s.timestamp, s.exemplar))
            added = [
                (key, value)
                for suffix in _SUFFIXES[family.type]
                for key, value in by_name.get(family.name + suffix, ())
                if key not in seen and self.keep(dict(key[1]))
            ]
            for (name, labels), value in sorted(added, key=lambda kv: _order(*kv[0])):
                merged.samples.append(Sample(name, dict(labels), value))
            yield merged
