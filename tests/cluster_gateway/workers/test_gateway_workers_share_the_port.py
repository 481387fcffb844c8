"""`fleetgate gateway --workers 2`: two serving processes on one port, one control plane.

Both processes answer (each `/health` names its worker), completions succeed, and SIGTERM stops
the gateway process and its worker (the fixture would leak the worker otherwise).
"""

from __future__ import annotations

import re
import signal
import time

import httpx

from modelsim.fleet import SimFleet
from tests.procs import fleetgate, read_until

MODEL = "meta-llama/Llama-3.1-8B-Instruct"


def test_two_workers_serve_one_port_and_stop_together(sim: SimFleet) -> None:
    p = fleetgate("gateway", "--pods", ",".join(sim.urls), "--port", "0", "--workers", "2")
    try:
        assert p.stderr is not None
        port = None
        lines: list[str] = []
        deadline = time.monotonic() + 60
        worker_up = False
        while (port is None or not worker_up) and time.monotonic() < deadline:
            line = p.stderr.readline()
            if not line:
                break
            lines.append(line)
            if m := re.search(r"listening on http://127\.0\.0\.1:(\d+)", line):
                port = int(m.group(1))
            worker_up = worker_up or "gateway worker 1" in line
        assert port and worker_up, lines
        seen: set[int] = set()
        url = f"http://127.0.0.1:{port}"
        for _ in range(200):  # new connections: the kernel spreads them over both listeners
            with httpx.Client(base_url=url, timeout=10) as c:
                seen.add(c.get("/health").json()["worker"])
                if seen == {0, 1}:
                    break
        assert seen == {0, 1}
        ok = 0
        for i in range(20):
            with httpx.Client(base_url=url, timeout=30) as c:
                r = c.post(
                    "/v1/chat/completions",
                    json={
                        "model": MODEL,
                        "messages": [{"role": "user", "content": f"q{i}"}],
                        "max_tokens": 2,
                    },
                )
                ok += r.status_code == 200
        assert ok == 20
        p.send_signal(signal.SIGTERM)
        assert p.wait(timeout=30) == 0
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()


def test_workers_serve_ext_proc_on_a_port_the_kernel_picked(sim: SimFleet) -> None:
    """`--extproc-port 0`: the workers get the bound port (a 0 in their spec failed validation, so
    the worker crashed and was restarted every second while the gateway process served alone)."""
    p = fleetgate(
        "gateway", "--pods", ",".join(sim.urls), "--port", "0", "--extproc-port", "0", "--workers", "2"
    )
    try:
        assert p.stderr is not None
        _, lines = read_until(p.stderr, r"gateway worker 1 \(pid \d+\) serving on port", timeout_s=60)
        assert not any("exited with" in line for line in lines), lines
        p.send_signal(signal.SIGTERM)
        assert p.wait(timeout=30) == 0
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
