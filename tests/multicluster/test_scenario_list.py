"""The netns tests and the shared scenario list (`fleetgate/netbed/scenarios.py`, which the kind flow
runs too) name the same scenarios: every listed scenario is a test here, every bed test is listed."""

from __future__ import annotations

import importlib
import inspect
from pathlib import Path

from fleetgate.netbed import scenarios

HERE = Path(__file__).resolve().parent
NOT_SCENARIOS = {"test_netns_availability.py", "test_demo_netns.py", "test_scenario_list.py"}


def _bed_tests() -> set[str]:
    found = set()
    for path in sorted(HERE.glob("test_*.py")):
        if path.name in NOT_SCENARIOS:
            continue
        module = importlib.import_module(f"tests.multicluster.{path.stem}")
        for name, fn in inspect.getmembers(module, inspect.iscoroutinefunction):
            if name.startswith("test_") and fn.__module__ == module.__name__:
                found.add(f"{path.name}::{name}")
    return found


def test_every_scenario_is_a_netns_test_and_every_netns_test_a_scenario() -> None:
    listed = [s.netns_test for s in scenarios.SCENARIOS]
    assert len(set(listed)) == len(listed)
    assert set(listed) == _bed_tests()
    assert len({s.name for s in scenarios.SCENARIOS}) == len(listed)


def test_every_scenario_names_a_topology_and_only_known_capabilities() -> None:
    for s in scenarios.SCENARIOS:
        assert s.topology in scenarios.TOPOLOGIES, s
        assert s.needs <= scenarios.NETNS_CAPABILITIES, s  # the bed can run every one of them
    assert scenarios.KIND_CAPABILITIES <= scenarios.NETNS_CAPABILITIES


def test_the_kind_topology_holds_every_scenario_topologys_regions() -> None:
    kind_regions = {c.region for c in scenarios.KIND_TOPOLOGY.clusters}
    for topo in scenarios.TOPOLOGIES.values():
        assert {c.region for c in topo.clusters} <= kind_regions
