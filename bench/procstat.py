"""CPU time and memory of a router's processes from Linux /proc, for per-request cost on a shared box.

Wall-clock throughput on a loaded 2-core machine says as much about the neighbours as about the
router; the CPU seconds the router's own processes burned per request do not. A router's processes
are the ones the bench started for it plus all their descendants (pre-fork workers, Envoy's
children), looked up at every sample, so a server that forks its workers is counted whole.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterable
from pathlib import Path

_TICK = os.sysconf("SC_CLK_TCK")


def _stat_fields(pid: int) -> list[str]:
    # the command name (field 2) may contain spaces and parentheses: split after its closing one
    return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()


def descendants(roots: Iterable[int]) -> set[int]:
    """`roots` and every live process below them."""
    children: dict[int, list[int]] = {}
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            ppid = int(_stat_fields(int(entry.name))[1])
        except (OSError, IndexError, ValueError):
            continue
        children.setdefault(ppid, []).append(int(entry.name))
    out: set[int] = set()
    todo = list(roots)
    while todo:
        pid = todo.pop()
        if pid in out:
            continue
        out.add(pid)
        todo.extend(children.get(pid, ()))
    return out


def process_cpu_clock(pid: int) -> float:
    """CPU seconds of process `pid` so far, to the nanosecond (Linux's per-process CPU clock, the
    scheduler's own runtime): /proc's utime+stime move in 10 ms ticks, too coarse for a pod that
    spends 1% of a core over a few seconds."""
    return time.clock_gettime(((~pid) << 3) | 2)  # CPUCLOCK_SCHED of that pid (clock_getcpuclockid)


def cpu_seconds(pids: Iterable[int]) -> float:
    """utime + stime of the processes (and of their reaped children), in seconds; gone ones count 0."""
    total = 0
    for pid in pids:
        try:
            f = _stat_fields(pid)
        except OSError:
            continue
        # fields after the name, 0-based: 11 utime, 12 stime, 13 cutime, 14 cstime
        total += int(f[11]) + int(f[12]) + int(f[13]) + int(f[14])
    return total / _TICK


def io_calls(pid: int) -> tuple[int, int]:
    """(read, write) system calls the process has made (/proc/PID/io `syscr`, `syscw`); a socket
    read that finds several SSE chunks queued counts once, which is what makes a saturated relay
    cheaper per chunk. (0, 0) for a process that is gone."""
    try:
        fields = dict(line.split(": ", 1) for line in Path(f"/proc/{pid}/io").read_text().splitlines())
    except OSError:
        return 0, 0
    return int(fields["syscr"]), int(fields["syscw"])


def tcp_active_opens() -> int:
    """TCP connections this host has opened (/proc/net/snmp `Tcp: ActiveOpens`, system-wide): the
    difference around a storm, less the client's own, is how many connections the row's hops had
    to open (a pool growing) rather than reuse."""
    rows = [
        line.split() for line in Path("/proc/net/snmp").read_text().splitlines() if line.startswith("Tcp:")
    ]
    names, values = rows[0], rows[1]
    return int(values[names.index("ActiveOpens")])


def _status_kb(pid: int, key: str) -> int:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith(key + ":"):
                return int(line.split()[1])
    except OSError:
        pass
    return 0


def rss_mb(pids: Iterable[int]) -> float:
    """Resident memory now, summed over the processes, in MB."""
    return sum(_status_kb(p, "VmRSS") for p in pids) / 1024.0


def peak_rss_mb(pids: Iterable[int]) -> float:
    """Each process's high-water resident memory (VmHWM), summed, in MB."""
    return sum(_status_kb(p, "VmHWM") for p in pids) / 1024.0


class CpuMeter:
    """CPU seconds burned by a process tree between `start()` and `stop()`."""

    def __init__(self, roots: list[int]) -> None:
        self.roots = roots
        self._t0 = 0.0

    def start(self) -> None:
        self._t0 = cpu_seconds(descendants(self.roots)) if self.roots else 0.0

    def stop(self) -> float:
        return (cpu_seconds(descendants(self.roots)) if self.roots else 0.0) - self._t0
