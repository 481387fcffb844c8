"""Two tiny simulated pods in a thread, for the tests that start a real `fleetgate gateway --workers`."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from modelsim.fleet import PodSpec, SimFleet


@pytest.fixture
def sim() -> Iterator[SimFleet]:
    fleet = SimFleet([PodSpec(profile="tiny"), PodSpec(profile="tiny")])
    fleet.start_in_thread()
    yield fleet
    fleet.stop_thread()
