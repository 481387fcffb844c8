"""SIGTERM drains `fleetgate gateway` (docs/drain.md): `/ready` answers 503 while it still serves,
then it stops accepting, and every stream in flight at the signal runs to its end before the process
exits 0 — in the gateway process and in its worker processes alike."""

from __future__ import annotations

import re
import signal
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import pytest
import yaml

from modelsim.fleet import PodSpec, SimFleet
from tests.procs import fleetgate, read_until

from .conftest import chat

pytestmark = pytest.mark.timeout(120)

NOTICE_S = 3.0
STREAMS = 4


@pytest.fixture
def slow_sim() -> Iterator[SimFleet]:
    # ~5 ms a decode step x 30: a 64-token stream takes ~10 s, well past the notice period
    fleet = SimFleet([PodSpec(profile="tiny", time_scale=30.0) for _ in range(2)])
    fleet.start_in_thread()
    yield fleet
    fleet.stop_thread()


@dataclass
class Stream:
    first_chunk: threading.Event = field(default_factory=threading.Event)
    lines: list[str] = field(default_factory=list)
    ended_at: float = 0.0
    error: str = ""


def _stream(base: str, out: Stream) -> None:
    try:
        with httpx.Client(base_url=base, timeout=60) as c:  # its own connection
            body = chat("tell me a long story", max_tokens=64, stream=True)
            with c.stream("POST", "/v1/chat/completions", json=body) as r:
                assert r.status_code == 200, r.read()
                for line in r.iter_lines():
                    if line.startswith("data: "):
                        out.lines.append(line)
                        out.first_chunk.set()
    except Exception as exc:  # recorded, asserted on below
        out.error = f"{type(exc).__name__}: {exc}"
    finally:
        out.ended_at = time.monotonic()
        out.first_chunk.set()


def test_sigterm_stops_accepting_and_lets_every_stream_in_flight_finish(
    slow_sim: SimFleet, tmp_path: Path
) -> None:
    cfg = tmp_path / "gw.yaml"
    cfg.write_text(
        yaml.safe_dump(
            {
                "discovery": {"static": {"endpoints": slow_sim.urls}},
                "server": {"drainNoticeS": NOTICE_S, "drainTimeoutS": 30},
            }
        )
    )
    p = fleetgate("gateway", "--config", str(cfg), "--port", "0", "--workers", "2")
    threads: list[threading.Thread] = []
    try:
        assert p.stderr is not None
        m, _ = read_until(p.stderr, r"listening on (http://127\.0\.0\.1:\d+)")
        base = m.group(1)
        read_until(p.stderr, r"started 1 gateway worker")
        deadline = time.monotonic() + 30
        while httpx.get(f"{base}/ready", timeout=5).status_code != 200:
            assert time.monotonic() < deadline, "the gateway never became ready"
            time.sleep(0.05)
        streams = [Stream() for _ in range(STREAMS)]
        threads = [threading.Thread(target=_stream, args=(base, s), daemon=True) for s in streams]
        for t in threads:
            t.start()
        for s in streams:
            assert s.first_chunk.wait(30), "a stream never started"
        assert not any(s.error for s in streams), [s.error for s in streams]

        p.send_signal(signal.SIGTERM)
        signalled = time.monotonic()
        # notice: still accepting, but out of rotation in every serving process (each probe is a new
        # connection, which the kernel hands to either process; the workers hear of the drain by a
        # signal, a moment after the gateway process); then no new connection is accepted
        probes: list[tuple[float, int]] = []
        closing: list[float] = []
        fresh = httpx.Client(base_url=base, timeout=2, limits=httpx.Limits(max_keepalive_connections=0))
        while True:
            assert time.monotonic() < signalled + 20, "the gateway kept accepting connections"
            at = time.monotonic()
            try:
                r = fresh.get("/ready")  # a new connection each time (no keep-alive)
            except httpx.ConnectError:
                break
            except (httpx.RemoteProtocolError, httpx.ReadError):
                # a connection the kernel queued just as a listener closed is dropped unanswered
                # (closed, or reset); only at the end of the notice (the 503 checks below), and
                # refusals follow
                closing.append(at)
                time.sleep(0.02)
                continue
            probes.append((at, r.status_code))
            if r.status_code == 503:
                assert r.json().get("draining") is True, r.text
            time.sleep(0.02)
        first_503 = next((at for at, status in probes if status == 503), None)
        assert first_503 is not None, f"/ready never answered 503 during the notice period: {probes}"
        fresh.close()
        settled = [status for at, status in probes if at > first_503 + 0.25]
        assert len(settled) >= 3 and set(settled) == {503}, probes
        assert all(at > first_503 + 0.25 for at in closing), (closing, probes)
        refused_at = time.monotonic()
        assert p.wait(timeout=40) == 0
        for t in threads:
            t.join(10)
        for s in streams:
            assert not s.error, s.error
            assert s.lines and s.lines[-1] == "data: [DONE]", s.lines[-3:]
            assert not any('"error"' in line for line in s.lines), s.lines[-3:]
            assert s.ended_at > refused_at, "the stream ended before the listeners closed: not a drain test"
        log = p.stderr.read()
        assert re.search(r"draining", log), log[-2000:]
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
        for t in threads:
            t.join(5)
