"""`--workers auto` counts the CPUs this process may use (common/cpu_budget.py): the affinity mask,
capped by the smallest CPU quota on its cgroup path (v2 `cpu.max`, v1 CFS quota), not the host's
cores. Fake cgroup trees stand in for /sys/fs/cgroup and /proc/self/cgroup."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from common.cpu_budget import cgroup_cpu_quota, usable_cpus
from common.worker_processes import resolve_count


def write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


def v2(tmp_path: Path, quotas: dict[str, str], own: str = "/kubepods/pod1/ctr") -> dict[str, Path]:
    root = tmp_path / "cgroup"
    for rel, value in quotas.items():
        write(root / rel.strip("/") / "cpu.max", value)
    (root / own.strip("/")).mkdir(parents=True, exist_ok=True)
    write(tmp_path / "self", f"0::{own}\n")
    return {"root": root, "self_cgroup": tmp_path / "self"}


def test_a_v2_quota_caps_the_count(tmp_path: Path) -> None:
    paths = v2(tmp_path, {"/kubepods/pod1/ctr": "200000 100000"})
    assert cgroup_cpu_quota(**paths) == 2.0
    assert usable_cpus(**paths) == min(2, len(os.sched_getaffinity(0)))


def test_the_smallest_quota_on_the_path_wins_and_max_is_none(tmp_path: Path) -> None:
    paths = v2(tmp_path, {"/kubepods/pod1": "150000 100000", "/kubepods/pod1/ctr": "max 100000"})
    assert cgroup_cpu_quota(**paths) == 1.5
    assert usable_cpus(**paths) == 1  # rounded down: a second process would only be throttled


def test_no_quota_leaves_the_affinity_mask(tmp_path: Path) -> None:
    paths = v2(tmp_path, {"/kubepods/pod1/ctr": "max 100000"})
    assert cgroup_cpu_quota(**paths) is None
    assert usable_cpus(**paths) == len(os.sched_getaffinity(0))


def test_a_v1_cfs_quota_caps_the_count(tmp_path: Path) -> None:
    root = tmp_path / "cgroup"
    ctr = root / "cpu,cpuacct" / "kubepods" / "ctr"
    write(ctr / "cpu.cfs_quota_us", "50000\n")
    write(ctr / "cpu.cfs_period_us", "100000\n")
    write(root / "cpu,cpuacct" / "cpu.cfs_quota_us", "-1\n")
    write(root / "cpu,cpuacct" / "cpu.cfs_period_us", "100000\n")
    write(tmp_path / "self", "4:memory:/kubepods/ctr\n3:cpu,cpuacct:/kubepods/ctr\n1:name=systemd:/\n")
    paths = {"root": root, "self_cgroup": tmp_path / "self"}
    assert cgroup_cpu_quota(**paths) == 0.5
    assert usable_cpus(**paths) == 1  # never fewer than one


def test_a_hybrid_host_reads_the_v1_cpu_hierarchy(tmp_path: Path) -> None:
    """cgroup v1 controllers with the unified hierarchy mounted beside them (`0::/` has no cpu.max)."""
    root = tmp_path / "cgroup"
    (root / "unified").mkdir(parents=True)
    ctr = root / "cpu,cpuacct" / "job"
    write(ctr / "cpu.cfs_quota_us", "300000\n")
    write(ctr / "cpu.cfs_period_us", "100000\n")
    write(tmp_path / "self", "4:memory:/job\n3:cpu,cpuacct:/job\n0::/\n")
    paths = {"root": root, "self_cgroup": tmp_path / "self"}
    assert cgroup_cpu_quota(**paths) == 3.0
    assert usable_cpus(**paths) == min(3, len(os.sched_getaffinity(0)))


def test_without_cgroup_files_the_count_is_the_mask(tmp_path: Path) -> None:
    paths = {"root": tmp_path / "none", "self_cgroup": tmp_path / "missing"}
    assert cgroup_cpu_quota(**paths) is None
    assert usable_cpus(**paths) == len(os.sched_getaffinity(0))


def test_auto_follows_the_affinity_mask_of_this_process() -> None:
    mask = os.sched_getaffinity(0)
    try:
        os.sched_setaffinity(0, {min(mask)})
        assert resolve_count("auto") == 1
    finally:
        os.sched_setaffinity(0, mask)
    assert resolve_count("3") == 3


@pytest.mark.parametrize("bad", ["0", "-1", "many"])
def test_a_count_that_is_no_count_is_refused(bad: str) -> None:
    with pytest.raises(ValueError):
        resolve_count(bad)
