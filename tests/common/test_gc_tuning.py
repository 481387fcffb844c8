"""The servers' collector settings: frozen start-up heap, larger thresholds, and a way out."""

from __future__ import annotations

import gc
from collections.abc import Iterator

import pytest

from common import gc_tuning


@pytest.fixture
def restore_gc() -> Iterator[None]:
    before = gc.get_threshold()
    yield
    gc.set_threshold(*before)
    gc.unfreeze()


def test_tuning_freezes_the_start_up_heap_and_raises_the_thresholds(restore_gc: None) -> None:
    assert gc_tuning.tune_for_serving({}) is True
    assert gc.get_threshold() == gc_tuning.SERVING_THRESHOLDS
    assert gc.get_freeze_count() > 1000  # every module, class and constant alive at start-up


def test_fleetgate_gc_default_keeps_the_interpreters_settings(restore_gc: None) -> None:
    before = gc.get_threshold()
    assert gc_tuning.tune_for_serving({"FLEETGATE_GC": "default"}) is False
    assert gc.get_threshold() == before
