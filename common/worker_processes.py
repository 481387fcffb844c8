"""Worker processes that share a server's listening ports, restarted when they die.

Both tiers scale a data plane over every core the same way: the main process keeps the control
plane once and starts N-1 workers that listen on the same ports through SO_REUSEPORT, so the
kernel spreads connections over all of them. A worker that exits is restarted after a pause; on
stop each gets SIGTERM (finish what it serves) and, after a grace period, SIGKILL. A worker whose
main process died (SIGKILL, OOM) gets SIGTERM too (`die_with_parent`): an orphan would keep
serving the shared port on a config and a fleet view nobody updates any more.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import ctypes
import logging
import os
import signal
import subprocess
from collections.abc import Callable

from common.cpu_budget import usable_cpus

log = logging.getLogger("fleetgate.workers")

RESTART_PAUSE_S = 1.0
PARENT_ENV = "FLEETGATE_WORKER_PARENT"  # the main process's pid, set for each worker it starts
_PR_SET_PDEATHSIG = 1  # linux/prctl.h


def die_with_parent() -> None:
    """Have the kernel send this worker SIGTERM when its main process dies; call it first thing.

    Linux's PR_SET_PDEATHSIG; a main process already gone by the time this runs (the race the
    man page warns of) is caught by comparing the parent pid with the one the main process left
    in `FLEETGATE_WORKER_PARENT`. Elsewhere (no prctl) this does nothing."""
    expected = os.environ.get(PARENT_ENV)
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(_PR_SET_PDEATHSIG, int(signal.SIGTERM), 0, 0, 0)
    except (OSError, AttributeError):
        return
    if expected is not None and os.getppid() != int(expected):
        os.kill(os.getpid(), signal.SIGTERM)


def workers_arg(value: str) -> str:
    """argparse type of `--workers`: a number of processes (1-256) or `auto`."""
    if value != "auto" and not (value.isdigit() and 1 <= int(value) <= 256):
        raise argparse.ArgumentTypeError(f"{value!r}: give a number of processes (1-256) or auto")
    return value


def resolve_count(requested: str | int | None, *, cores: int | None = None) -> int:
    """`auto` (or None) is one worker per CPU this process may use (`cpu_budget.usable_cpus`: the
    affinity mask and the cgroup's quota, not the host's count); a number is taken as it is."""
    if requested in (None, "auto"):
        return max(1, cores if cores is not None else usable_cpus())
    try:
        count = int(requested)
    except ValueError:
        raise ValueError(f"--workers: {requested!r} is not a positive number or 'auto'") from None
    if count < 1:
        raise ValueError(f"--workers: {requested} is not a positive number or 'auto'")
    return count


class WorkerProcesses:
    """Workers 1..count-1, each started from `command(k)`; worker 0 is the calling process."""

    def __init__(self, what: str, count: int, command: Callable[[int], list[str]]) -> None:
        self.what = what
        self.count = count
        self._command = command
        self._procs: dict[int, subprocess.Popen[bytes]] = {}
        self._task: asyncio.Task[None] | None = None
        self._stopping = False

    def _spawn(self, k: int) -> subprocess.Popen[bytes]:
        env = {**os.environ, PARENT_ENV: str(os.getpid())}
        return subprocess.Popen(self._command(k), stdin=subprocess.DEVNULL, env=env)

    def start(self) -> None:
        for k in range(1, self.count):
            self._procs[k] = self._spawn(k)
        self._task = asyncio.create_task(self._watch(), name=f"{self.what}-workers")

    async def _watch(self) -> None:
        while not self._stopping:
            await asyncio.sleep(RESTART_PAUSE_S)
            for k, proc in list(self._procs.items()):
                if proc.poll() is not None and not self._stopping:
                    log.warning("%s worker %d exited with %s; restarting it", self.what, k, proc.returncode)
                    self._procs[k] = self._spawn(k)

    def begin_drain(self) -> None:
        """Tell every worker the server is draining (SIGUSR1): its `/ready` answers 503 from now
        on while it keeps serving until `stop()` (docs/drain.md). A worker that exits from now on is
        not restarted: a fresh one would not know of the drain and would answer ready again."""
        self._stopping = True
        for proc in self._procs.values():
            if proc.poll() is None:
                proc.send_signal(signal.SIGUSR1)

    @property
    def pids(self) -> list[int]:
        return [p.pid for p in self._procs.values()]

    async def stop(self, grace_s: float = 8.0) -> None:
        self._stopping = True
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        for proc in self._procs.values():
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
        for proc in self._procs.values():
            try:
                await asyncio.to_thread(proc.wait, grace_s)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        self._procs.clear()
