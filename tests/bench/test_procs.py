"""The benches' process helpers (bench/procs.py) against real subprocesses: each bench's readiness,
draining and shutdown depend on them, so a regression here would stall or leak every bench."""

from __future__ import annotations

import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from bench import procs


def _python(code: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-u", "-c", code], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )


@pytest.fixture
def started() -> Iterator[list[subprocess.Popen[str]]]:
    """Processes a test starts; any still running at the end are killed."""
    ps: list[subprocess.Popen[str]] = []
    yield ps
    for p in ps:
        if p.poll() is None:
            p.kill()
        p.wait(10)
        for pipe in (p.stdout, p.stderr):
            if pipe is not None:
                pipe.close()


def test_expect_returns_group_one_of_matching_lines_only(started: list[subprocess.Popen[str]]) -> None:
    p = _python(
        "print('noise'); print('listening on http://a:1'); print('x'); print('listening on http://b:2')"
    )
    started.append(p)
    assert procs.expect(p.stdout, r"listening on (http://\S+)", 2, timeout=10) == ["http://a:1", "http://b:2"]


def test_expect_raises_at_end_of_stream_with_what_it_found(started: list[subprocess.Popen[str]]) -> None:
    p = _python("print('port 7'); print('bye')")
    started.append(p)
    t0 = time.monotonic()
    with pytest.raises(RuntimeError, match=r"expected 2 x .*got \['7'\]"):
        procs.expect(p.stdout, r"port (\d+)", 2, timeout=10)
    assert time.monotonic() - t0 < 5  # EOF ends the wait, not the deadline


def test_expect_gives_up_after_its_deadline_while_lines_keep_coming(
    started: list[subprocess.Popen[str]],
) -> None:
    p = _python("import time\nfor i in range(200):\n    print('tick', i)\n    time.sleep(0.05)")
    started.append(p)
    t0 = time.monotonic()
    with pytest.raises(RuntimeError, match="expected 1 x"):
        procs.expect(p.stdout, r"ready (\d+)", 1, timeout=0.5)
    elapsed = time.monotonic() - t0
    assert 0.4 < elapsed < 3
    assert p.poll() is None  # the deadline, not the process ending, stopped the read


def test_expect_refuses_an_uncaptured_pipe() -> None:
    with pytest.raises(RuntimeError, match="not captured"):
        procs.expect(None, r"(x)", 1)


def test_drained_process_never_blocks_on_a_full_pipe(started: list[subprocess.Popen[str]]) -> None:
    # 2 MiB on each pipe, far past the 64 KiB a pipe buffers: undrained, the child would block forever.
    p = _python(
        "import sys\nfor _ in range(2048):\n    print('o' * 1023)\n    print('e' * 1023, file=sys.stderr)"
    )
    started.append(p)
    procs.drain_in_background(p.stdout, None, p.stderr)
    assert p.wait(timeout=20) == 0


def test_stop_terminates_gracefully(started: list[subprocess.Popen[str]]) -> None:
    p = _python("import time\nprint('up')\ntime.sleep(30)")
    started.append(p)
    procs.expect(p.stdout, r"(up)", 1, timeout=10)
    t0 = time.monotonic()
    procs.stop(p)
    assert p.returncode == -signal.SIGTERM
    assert time.monotonic() - t0 < 5


def test_stop_kills_what_ignores_sigterm(started: list[subprocess.Popen[str]]) -> None:
    p = _python(
        "import signal, time\nsignal.signal(signal.SIGTERM, signal.SIG_IGN)\nprint('up')\ntime.sleep(30)"
    )
    started.append(p)
    procs.expect(p.stdout, r"(up)", 1, timeout=10)  # the handler is in place
    t0 = time.monotonic()
    procs.stop(p, timeout=0.5)
    assert p.returncode == -signal.SIGKILL
    assert 0.4 < time.monotonic() - t0 < 5


def test_stop_sends_the_signal_asked_for(started: list[subprocess.Popen[str]]) -> None:
    p = _python("import time\nprint('up')\ntime.sleep(30)")
    started.append(p)
    procs.expect(p.stdout, r"(up)", 1, timeout=10)
    procs.stop(p, signal.SIGKILL)
    assert p.returncode == -signal.SIGKILL


def test_stop_leaves_an_exited_process_alone(started: list[subprocess.Popen[str]]) -> None:
    p = _python("raise SystemExit(4)")
    started.append(p)
    p.wait(10)
    procs.stop(p)
    assert p.returncode == 4


def test_free_port_is_a_bindable_loopback_port() -> None:
    port = procs.free_port()
    assert 0 < port < 65536
    with socket.socket() as s:
        s.bind(("127.0.0.1", port))


def test_wait_http_fails_fast_when_the_process_exits(started: list[subprocess.Popen[str]]) -> None:
    p = _python("raise SystemExit(3)")
    started.append(p)
    t0 = time.monotonic()
    with pytest.raises(RuntimeError, match="exited with 3"):
        procs.wait_http(f"http://127.0.0.1:{procs.free_port()}/health", 20, p)
    assert time.monotonic() - t0 < 10


def test_spawned_sim_announces_its_pods_answers_health_and_stops(
    started: list[subprocess.Popen[str]],
) -> None:
    """The path every bench takes: spawn `fleetgate sim`, read its addresses, wait for HTTP, stop it."""
    sim = procs.spawn("sim", "--pods", "2", "--base-port", "0", "--profile", "tiny", "--log-level", "warning")
    started.append(sim)
    urls = procs.expect(sim.stdout, r"listening on (http://\S+)", 2, timeout=60)
    procs.drain_in_background(sim.stdout, sim.stderr)
    assert len(set(urls)) == 2
    for u in urls:
        assert u.startswith("http://127.0.0.1:")
        procs.wait_http(u + "/health", 30, sim)
    # a readiness check that never holds times out instead of returning
    with pytest.raises(RuntimeError, match=r"not ready after 0\.5s"):
        procs.wait_http(urls[0] + "/health", 0.5, sim, check=lambda r: False)
    with pytest.raises(RuntimeError, match="not ready"):
        procs.wait_http(urls[0] + "/health", 0.5, sim, ok=204)
    procs.stop(sim)
    assert sim.returncode is not None


_TINY = ("--profile", "tiny", "--log-level", "warning")


def test_expect_in_file_reads_a_file_fed_by_the_process(tmp_path: Path) -> None:
    """The routing bench logs to files (a pipe nobody reads would stall a chatty peer): the pods'
    addresses are read back from the simulator's log, in the order printed."""
    log = tmp_path / "sim.log"
    with log.open("wb") as out:
        sim = subprocess.Popen(
            [sys.executable, "-m", "fleetgate", "sim", "--pods", "3", "--base-port", "0", *_TINY],
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    try:
        urls = procs.expect_in_file(log, procs.SIM_LISTENING, 3, sim, timeout=60)
        assert len(set(urls)) == 3 and all(u.startswith("http://127.0.0.1:") for u in urls)
        lines = [ln for ln in log.read_text().splitlines() if "listening on" in ln]
        assert [ln.split()[2] for ln in lines] == ["0", "1", "2"]  # pod order is print order
        for u in urls:
            procs.wait_http(u + "/health", 30, sim)
    finally:
        procs.stop(sim)


def test_expect_in_file_fails_fast_when_the_process_exits_first(tmp_path: Path) -> None:
    log = tmp_path / "out.log"
    with log.open("wb") as out:
        p = subprocess.Popen([sys.executable, "-c", "print('port 7'); raise SystemExit(3)"], stdout=out)
    t0 = time.monotonic()
    with pytest.raises(RuntimeError, match=r"exited with 3 after 1 of 2"):
        procs.expect_in_file(log, r"port (\d+)", 2, p, timeout=30)
    assert time.monotonic() - t0 < 10  # the exit ended the wait, not the deadline


def test_expect_in_file_counts_complete_lines_written_before_the_exit(tmp_path: Path) -> None:
    log = tmp_path / "out.log"
    with log.open("wb") as out:
        p = subprocess.Popen([sys.executable, "-c", "print('port 7'); print('port 8')"], stdout=out)
    p.wait()  # gone before the first look at the file: its lines still count
    assert procs.expect_in_file(log, r"port (\d+)", 2, p, timeout=30) == ["7", "8"]


def test_expect_in_file_counts_an_unended_last_line_once_the_process_is_gone(tmp_path: Path) -> None:
    """While the process runs, an unended line may be cut mid-write; after its exit it is final."""
    log = tmp_path / "out.log"
    with log.open("wb") as out:
        p = subprocess.Popen(
            [sys.executable, "-c", "import sys; print('port 7'); sys.stdout.write('port 8')"], stdout=out
        )
    p.wait()
    assert procs.expect_in_file(log, r"port (\d+)", 2, p, timeout=30) == ["7", "8"]


def test_expect_in_file_gives_up_after_its_deadline(
    tmp_path: Path, started: list[subprocess.Popen[str]]
) -> None:
    log = tmp_path / "silent.log"
    p = _python("import time; time.sleep(30)")
    started.append(p)
    with pytest.raises(RuntimeError, match=r"0 of 1 .* after 0 s"):
        procs.expect_in_file(log, r"ready (\d+)", 1, p, timeout=0.3)  # the file never even appears
    assert p.poll() is None
