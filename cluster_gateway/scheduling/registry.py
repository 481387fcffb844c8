"""Name → factory for filters, scorers and pickers, so profiles in config name their plug-ins.

Adding a plug-in is one `register_*` call; nothing else branches on names.
"""

from __future__ import annotations

import random
from collections.abc import Callable

from cluster_gateway.scheduling import filters, pickers, scorers
from cluster_gateway.scheduling.types import Filter, Picker, Scorer

FilterFactory = Callable[[], Filter]
ScorerFactory = Callable[[], Scorer]
PickerFactory = Callable[[random.Random], Picker]

FILTERS: dict[str, FilterFactory] = {}
SCORERS: dict[str, ScorerFactory] = {}
PICKERS: dict[str, PickerFactory] = {}


def register_filter(name: str, factory: FilterFactory) -> None:
    FILTERS[name] = factory


def register_scorer(name: str, factory: ScorerFactory) -> None:
    SCORERS[name] = factory


def register_picker(name: str, factory: PickerFactory) -> None:
    PICKERS[name] = factory


for _f in (filters.ModelFilter, filters.HealthyFilter, filters.FreshFilter, filters.SaturationFilter):
    register_filter(_f.name, _f)
for _s in (
    scorers.QueueScorer,
    scorers.WaitingQueueScorer,
    scorers.LoadScorer,
    scorers.InflightScorer,
    scorers.KVCacheScorer,
    scorers.RawKVCacheScorer,
    scorers.PrefixScorer,
    scorers.PrefixHomeScorer,
    scorers.RawPrefixScorer,
    scorers.LoraScorer,
):
    register_scorer(_s.name, _s)
for _p in (
    pickers.MaxScorePicker,
    pickers.PowerOfTwoPicker,
    pickers.WeightedRandomPicker,
    pickers.RoundRobinPicker,
):
    register_picker(_p.name, _p)
