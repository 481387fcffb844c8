"""A worker process must not outlive its main process (it would keep serving the shared port)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

# the main process: starts one worker through WorkerProcesses, prints its pid, then waits forever
MAIN = textwrap.dedent(
    """
    import asyncio, sys
    from common.worker_processes import WorkerProcesses

    WORKER = [sys.executable, "-c",
              "import signal; from common.worker_processes import die_with_parent; "
              "die_with_parent(); print('armed', flush=True); signal.pause()"]

    async def main() -> None:
        workers = WorkerProcesses("test", 2, lambda k: WORKER)
        workers.start()
        print(workers.pids[0], flush=True)
        await asyncio.Event().wait()

    asyncio.run(main())
    """
)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # a zombie is gone for our purpose (its parent, init here, reaps it)
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="PR_SET_PDEATHSIG is Linux's")
def test_a_worker_exits_when_its_main_process_is_killed() -> None:
    main = subprocess.Popen(
        [sys.executable, "-c", MAIN],
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        stdout=subprocess.PIPE,
        text=True,
    )
    worker = 0
    try:
        assert main.stdout is not None
        worker = int(main.stdout.readline())
        assert main.stdout.readline().strip() == "armed"  # the worker's stdout is inherited
        assert _alive(worker)
        main.send_signal(signal.SIGKILL)
        main.wait(10)
        deadline = time.monotonic() + 10
        while _alive(worker):
            assert time.monotonic() < deadline, "the worker outlived its main process"
            time.sleep(0.02)
    finally:
        if main.poll() is None:
            main.kill()
            main.wait()
        if worker and _alive(worker):
            os.kill(worker, signal.SIGKILL)


def test_without_the_main_process_in_the_environment_nothing_is_armed_against_a_wrong_parent() -> None:
    # started by hand (no FLEETGATE_WORKER_PARENT): the race check has nothing to compare and
    # must not kill the process that called it
    out = subprocess.run(
        [
            sys.executable,
            "-c",
            "from common.worker_processes import die_with_parent; die_with_parent(); print('ok')",
        ],
        cwd=ROOT,
        env={k: v for k, v in os.environ.items() if k != "FLEETGATE_WORKER_PARENT"}
        | {"PYTHONPATH": str(ROOT)},
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert out.stdout.strip() == "ok", out.stderr
