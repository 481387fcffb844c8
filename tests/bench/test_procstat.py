"""/proc readings the throughput bench charges to a router: its whole process tree, CPU and memory."""

from __future__ import annotations

import os
import subprocess
import sys

from bench import procstat


def test_a_child_is_part_of_the_tree_and_its_cpu_is_counted() -> None:
    burn = "import time\nt = time.process_time()\nwhile time.process_time() - t < 0.3: pass\ninput()"
    child = subprocess.Popen([sys.executable, "-c", burn], stdin=subprocess.PIPE, text=True)
    try:
        assert child.pid in procstat.descendants([os.getpid()])
        meter = procstat.CpuMeter([os.getpid()])
        meter.start()
        # wait (on a condition, not a sleep) until the child burned its 0.3 s of CPU
        while procstat.cpu_seconds([child.pid]) < 0.3 and child.poll() is None:
            os.sched_yield()
        assert meter.stop() >= 0.2
        assert procstat.rss_mb([child.pid]) > 1 and procstat.peak_rss_mb([child.pid]) >= procstat.rss_mb(
            [child.pid]
        )
    finally:
        child.communicate("", timeout=10)


def test_gone_processes_count_zero() -> None:
    p = subprocess.Popen([sys.executable, "-c", "pass"])
    p.wait()
    assert procstat.cpu_seconds([p.pid]) == 0.0 and procstat.rss_mb([p.pid]) == 0.0
    assert procstat.CpuMeter([]).stop() == 0.0
    assert procstat.io_calls(p.pid) == (0, 0)


def test_read_and_write_calls_are_counted_per_call_not_per_byte() -> None:
    r, w = os.pipe()
    try:
        reads, writes = procstat.io_calls(os.getpid())
        for _ in range(3):
            os.write(w, b"x" * 10)
        assert os.read(r, 100) == b"x" * 30  # three writes queued, one read takes them all
        after_reads, after_writes = procstat.io_calls(os.getpid())
        assert after_writes - writes >= 3
        assert after_reads - reads >= 1
    finally:
        os.close(r)
        os.close(w)
