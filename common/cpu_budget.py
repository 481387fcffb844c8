"""How many CPUs this process may use: its affinity mask, capped by its cgroups' CPU quota.

`--workers auto` starts one serving process per usable CPU. `os.cpu_count()` is the host's count:
in a pod limited to 2 CPUs on a 64-core node it says 64, and `auto` would start 64 processes into a
2-CPU quota. Each process costs ~80 MB of memory (an OOM kill under the charts' 1 GiB limit) and
all of them would be throttled by the quota. The count here follows what the kernel enforces,
as Go's automaxprocs and the JVM's container support do:

- the affinity mask (`sched_getaffinity`: `taskset`, cpusets, Kubernetes' static CPU manager);
- the CPU quota of this process's cgroup and of every cgroup above it, cgroup v2 `cpu.max` or v1
  `cpu.cfs_quota_us` / `cpu.cfs_period_us`, the smallest one, rounded down (1.5 CPUs: one
  process; a Python process uses one CPU at most, and a second one would be throttled).

A pod with a CPU request and no limit has no quota: `auto` is then the node's (or the mask's)
count, so the Helm charts pass `--workers` explicitly (`workers` in their values).
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

CGROUP_ROOT = Path("/sys/fs/cgroup")
SELF_CGROUP = Path("/proc/self/cgroup")


def usable_cpus(*, root: Path = CGROUP_ROOT, self_cgroup: Path = SELF_CGROUP) -> int:
    """At least 1."""
    try:
        count = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):  # not Linux
        count = os.cpu_count() or 1
    quota = cgroup_cpu_quota(root=root, self_cgroup=self_cgroup)
    if quota is not None:
        count = min(count, int(quota))
    return max(1, count)


def cgroup_cpu_quota(*, root: Path = CGROUP_ROOT, self_cgroup: Path = SELF_CGROUP) -> float | None:
    """The smallest CPU quota (in CPUs) on this process's cgroup path, None when there is none."""
    try:
        lines = self_cgroup.read_text().splitlines()
    except OSError:
        return None
    limits: list[float] = []
    for line in lines:
        hierarchy, _, rest = line.partition(":")
        controllers, _, path = rest.partition(":")
        if hierarchy == "0" and controllers == "":  # cgroup v2 (unified)
            base = root / "unified" if (root / "unified").is_dir() else root
            limits += _walk(base, path, _v2_quota)
        elif "cpu" in controllers.split(","):  # cgroup v1: the cpu controller's hierarchy
            base = root / controllers  # e.g. cpu,cpuacct (usually with a `cpu` link to it)
            limits += _walk(base if base.is_dir() else root / "cpu", path, _v1_quota)
    return min(limits) if limits else None


def _walk(base: Path, path: str, read: Callable[[Path], float | None]) -> list[float]:
    """The quota of `base/path` and of each directory above it up to `base`."""
    found: list[float] = []
    d = base / path.strip("/")
    while True:
        q = read(d)
        if q is not None:
            found.append(q)
        if d == base or base not in d.parents:
            return found
        d = d.parent


def _v2_quota(d: Path) -> float | None:
    try:
        quota, _, period = (d / "cpu.max").read_text().strip().partition(" ")
    except OSError:
        return None
    if quota == "max" or not period:
        return None
    return _ratio(quota, period)


def _v1_quota(d: Path) -> float | None:
    try:
        quota = (d / "cpu.cfs_quota_us").read_text().strip()
        period = (d / "cpu.cfs_period_us").read_text().strip()
    except OSError:
        return None
    return _ratio(quota, period)


def _ratio(quota: str, period: str) -> float | None:
    try:
        q, p = int(quota), int(period)
    except ValueError:
        return None
    return q / p if q > 0 and p > 0 else None
