"""One `fleetgate sim` child process per demo cluster: spawn, learn its pod URLs, watch, stop.

Each cluster's simulated pods run in their own process so the simulators' CPU spreads over the
machine's cores. Children get their own session (a terminal Ctrl-C reaches only the demo, which
then stops them in order) and, on Linux, die with the demo if it is killed outright.
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import os
import re
import signal
import sys
from pathlib import Path

import yaml

_LISTENING = re.compile(r"^modelsim pod (\d+) listening on (http://\S+)")
_PR_SET_PDEATHSIG = 1
_LIBC = ctypes.CDLL(None, use_errno=True) if sys.platform.startswith("linux") else None


class ChildError(RuntimeError):
    """A child could not start or stopped on its own; the message names it."""


def _die_with_parent() -> None:
    """Runs in the child between fork and exec: SIGTERM it when the demo process dies."""
    if _LIBC is not None:
        with contextlib.suppress(AttributeError):
            _LIBC.prctl(_PR_SET_PDEATHSIG, int(signal.SIGTERM))


def _project_root() -> str:
    return str(Path(__file__).resolve().parent.parent)


class SimProcess:
    """`python -m fleetgate sim --pod-spec FILE --base-port 0` for one cluster."""

    def __init__(self, name: str, pod_spec: dict[str, object], workdir: Path, *, time_scale: float) -> None:
        self.name = name
        self.expected = len(pod_spec["pods"])  # type: ignore[arg-type]
        self.spec_file = workdir / f"{name}.pods.yaml"
        self.spec_file.write_text(yaml.safe_dump(pod_spec, sort_keys=False))
        self.log_file = workdir / f"{name}.sim.log"
        self.time_scale = time_scale
        self.proc: asyncio.subprocess.Process | None = None
        self.urls: list[str] = []
        self._drain: asyncio.Task[None] | None = None

    @property
    def pid(self) -> int | None:
        return self.proc.pid if self.proc is not None else None

    def argv(self) -> list[str]:
        return [
            sys.executable,
            "-m",
            "fleetgate",
            "sim",
            "--pod-spec",
            str(self.spec_file),
            "--base-port",
            "0",
            "--time-scale",
            repr(self.time_scale),
            "--log-level",
            "warning",
        ]

    async def start(self) -> None:
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join(p for p in (_project_root(), env.get("PYTHONPATH", "")) if p)
        env["PYTHONUNBUFFERED"] = "1"
        with self.log_file.open("wb") as log:
            self.proc = await asyncio.create_subprocess_exec(
                *self.argv(),
                stdin=asyncio.subprocess.DEVNULL,
                stdout=asyncio.subprocess.PIPE,
                stderr=log,
                env=env,
                start_new_session=True,
                preexec_fn=_die_with_parent,
            )

    async def wait_ready(self, timeout_s: float) -> list[str]:
        """Read the child's `listening on` lines until every pod is up; ChildError if it is not."""
        proc = self.proc
        assert proc is not None and proc.stdout is not None
        found: dict[int, str] = {}
        try:
            async with asyncio.timeout(timeout_s):
                while len(found) < self.expected:
                    line = await proc.stdout.readline()
                    if not line:
                        await proc.wait()
                        raise ChildError(
                            f"{self.describe()} {self.exit_reason(proc.returncode or 0)} while starting"
                            + (f"; its last log lines:\n{self.log_tail()}" if self.log_tail() else "")
                        )
                    m = _LISTENING.match(line.decode(errors="replace"))
                    if m:
                        found[int(m.group(1))] = m.group(2)
        except TimeoutError:
            raise ChildError(f"{self.describe()}: pods not listening after {timeout_s:.0f} s") from None
        self.urls = [found[i] for i in sorted(found)]
        self._drain = asyncio.create_task(self._drain_stdout(), name=f"drain-{self.name}")
        return self.urls

    async def _drain_stdout(self) -> None:
        """Keep reading so a chatty child never blocks on a full pipe."""
        assert self.proc is not None and self.proc.stdout is not None
        while await self.proc.stdout.readline():
            pass

    async def wait_exit(self) -> int:
        assert self.proc is not None
        return await self.proc.wait()

    def exit_reason(self, code: int) -> str:
        """Why a child ended, in words (asyncio reports death by signal N as code -N)."""
        if code < 0:
            try:
                name = signal.Signals(-code).name
            except ValueError:
                name = f"signal {-code}"
            return f"was killed by {name}"
        if code == 0:
            return "stopped on a signal from outside the demo (exit code 0)"
        return f"exited with code {code}"

    def describe(self) -> str:
        return f"simulated pods of {self.name} (pid {self.pid})"

    def log_tail(self, lines: int = 8) -> str:
        try:
            text = self.log_file.read_text(errors="replace")
        except OSError:
            return ""
        return "\n".join(text.strip().splitlines()[-lines:])

    async def stop(self, timeout_s: float = 10.0) -> None:
        """SIGTERM, then SIGKILL after `timeout_s`; always reaps the child."""
        proc = self.proc
        if proc is None:
            return
        if proc.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                proc.send_signal(signal.SIGTERM)
            try:
                async with asyncio.timeout(timeout_s):
                    await proc.wait()
            except TimeoutError:
                with contextlib.suppress(ProcessLookupError):
                    proc.kill()
                await proc.wait()
        if self._drain is not None:
            self._drain.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._drain
            self._drain = None
