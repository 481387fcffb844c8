"""The `bed` fixture: builds a Testbed from the test's `topology` marker argument, always tears it
down (children killed, namespaces deleted) and skips the whole suite where namespaces cannot be made."""

from __future__ import annotations

import functools
from collections.abc import Iterator
from pathlib import Path

import pytest

from fleetgate.netbed import netns
from fleetgate.netbed.bed import Testbed, Topology


@functools.cache
def _unavailable() -> str | None:
    reason = netns.unavailable_reason()
    if reason is None:
        netns.remove_orphans()
    return reason


@pytest.fixture
def bed(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Testbed]:
    reason = _unavailable()
    if reason is not None:
        pytest.skip(f"netns test bed unavailable: {reason}")
    marker = request.node.get_closest_marker("topology")
    if marker is None or not isinstance(marker.args[0], Topology):
        raise pytest.UsageError("a `bed` test needs @pytest.mark.topology(Topology(...))")
    tb = Testbed(marker.args[0], tmp_path)
    try:
        tb.start()
        yield tb
    finally:
        problems = tb.close()
        assert not problems, f"test bed teardown failed: {problems}"
