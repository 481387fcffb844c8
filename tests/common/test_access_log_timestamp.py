"""The access log's batched sink formats its timestamp itself (the date once a second)."""

from __future__ import annotations

import datetime as dt
import re

import pytest

from common.request_log import _FastSink


@pytest.mark.parametrize("at", [1_780_000_000.0, 1_780_000_000.0009, 1_780_000_000.5, 1_780_000_059.999])
def test_the_timestamp_is_isoformat_to_the_millisecond(at: float) -> None:
    expected = dt.datetime.fromtimestamp(at, tz=dt.UTC).isoformat(timespec="milliseconds")
    assert _FastSink()._timestamp(at) == expected


def test_the_date_part_follows_the_second() -> None:
    sink = _FastSink()
    first, second = sink._timestamp(1_780_000_000.25), sink._timestamp(1_780_000_001.5)
    assert first.endswith(":40.250+00:00") and second.endswith(":41.500+00:00"), (first, second)
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}\+00:00", second)
