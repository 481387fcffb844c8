"""`fleetgate <command>` as a real child process, for tests of what the CLI does as a process."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def fleetgate(command: str, *args: str) -> subprocess.Popen[str]:
    """Started from the repo root with both output streams piped as unbuffered text, so a test can
    read each bound-address line the moment it is logged."""
    return subprocess.Popen(
        [sys.executable, "-m", "fleetgate", command, *args],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )
