"""`bench.row_cpu` names each process of a row by what it runs, so an A/B reads per tier."""

from __future__ import annotations

import os
import subprocess
import sys

from bench.row_cpu import _processes


def test_each_process_of_the_row_is_named_by_its_module_and_pid() -> None:
    child = subprocess.Popen([sys.executable, "-m", "http.server", "--bind", "127.0.0.1", "0"])
    try:
        names = _processes([child.pid])
        assert names == {child.pid: f"http.server --bind [{child.pid}]"}
        assert os.getpid() not in names  # only the roots and what runs below them
    finally:
        child.kill()
        child.wait()
