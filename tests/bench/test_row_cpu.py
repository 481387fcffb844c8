"""`bench.row_cpu` names each process of a row by what it runs, so an A/B reads per tier, and its
paced mode counts only the CPU a window spent beyond the process's idle rate."""

from __future__ import annotations

import os
import socket
import subprocess
import sys

import pytest

from bench import procstat
from bench.row_cpu import _p99_ms, _processes, above_idle


def test_each_process_of_the_row_is_named_by_its_module_and_pid() -> None:
    child = subprocess.Popen([sys.executable, "-m", "http.server", "--bind", "127.0.0.1", "0"])
    try:
        names = _processes([child.pid])
        assert names == {child.pid: f"http.server --bind [{child.pid}]"}
        assert os.getpid() not in names  # only the roots and what runs below them
    finally:
        child.kill()
        child.wait()


def test_paced_cpu_is_what_the_busy_window_spent_beyond_the_idle_rate() -> None:
    # idle: 0.2 s of CPU in 10 s (2% of a core); busy: 0.5 s in 20 s, of which 0.4 s is background
    assert above_idle(0.2, 10.0, 0.5, 20.0) == pytest.approx(0.1)
    assert above_idle(0.0, 10.0, 0.3, 5.0) == pytest.approx(0.3)  # no background: all of it
    assert above_idle(0.2, 0.0, 0.3, 5.0) == pytest.approx(0.3)  # no idle window: nothing to take off


def test_storm_p99_is_the_99th_percentile_in_ms_and_none_without_streams() -> None:
    assert _p99_ms([i / 1000 for i in range(1, 201)]) == 199  # 200 TTFBs of 1..200 ms, unsorted is fine
    assert _p99_ms([0.5, 0.1]) == 500
    assert _p99_ms([]) is None


def test_active_opens_counts_each_connection_this_host_opens() -> None:
    with socket.create_server(("127.0.0.1", 0)) as srv:
        before = procstat.tcp_active_opens()
        conns = [socket.create_connection(srv.getsockname()) for _ in range(3)]
        after = procstat.tcp_active_opens()
        for c in conns:
            c.close()
    assert after - before >= 3  # system-wide: other processes' connects may add to it
