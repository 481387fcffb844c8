"""`fleetgate demo --netns` as a real process: its endpoint on the host's loopback serves through the
namespaced fleet with WAN latency, and it removes its namespaces when it stops."""

from __future__ import annotations

import re
import signal
import threading
import time

import httpx
import pytest

from fleetgate.netbed import netns
from fleetgate.netbed.bed import MODEL
from tests.procs import fleetgate

pytestmark = [pytest.mark.netns, pytest.mark.timeout(150)]


def test_demo_netns_serves_and_cleans_up() -> None:
    reason = netns.unavailable_reason()
    if reason is not None:
        pytest.skip(f"netns test bed unavailable: {reason}")
    proc = fleetgate(
        "demo", "--netns", "--port", "0", "--duration", "60", "--no-live", "--summary-every", "1"
    )
    errors: list[str] = []  # stderr, read all along (a full pipe would stall the demo) and shown on failure
    assert proc.stderr is not None
    threading.Thread(target=lambda: errors.extend(proc.stderr or ()), daemon=True).start()
    try:
        assert proc.stdout is not None
        lines: list[str] = []
        deadline = time.monotonic() + 90
        while not any(line.startswith("# cut a region") for line in lines) and time.monotonic() < deadline:
            line = proc.stdout.readline()
            if not line:
                break
            lines.append(line.rstrip("\n"))
        if not lines:  # the demo ended before its first line: say why
            proc.wait(10)
        assert lines and lines[0].startswith("global endpoint: http://127.0.0.1:"), (
            lines,
            proc.poll(),
            "".join(errors[-30:]),
        )
        endpoint = lines[0].split(": ", 1)[1]
        key = next(line.split(": ", 1)[1] for line in lines if line.startswith("api key: "))
        namespaces = re.findall(r"namespace (fgtb-\S+)\)", "\n".join(lines))
        assert len(namespaces) == 3
        body = {"model": MODEL, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 4}
        headers = {"authorization": f"Bearer {key}", "x-fleetgate-client-region": "ap-south"}
        t0 = time.monotonic()
        r = httpx.post(f"{endpoint}/v1/chat/completions", json=body, headers=headers, timeout=20)
        took_ms = 1000 * (time.monotonic() - t0)
        assert r.status_code == 200, r.text
        assert r.headers["x-fleetgate-cluster"] in {"us-east-1", "eu-west-1", "ap-south-1"}
        assert took_ms >= 2 * 20.0  # at least one round trip over the nearest region's WAN link
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(30) == 0
        assert not set(namespaces) & set(netns.ip("netns", "list").split()), "namespaces left behind"
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
