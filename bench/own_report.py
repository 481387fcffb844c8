"""Header of the report files that scenarios with their own plots write (global, overhead).

Same shape as the header `fleetgate bench` puts on the printed tables it keeps (bench/report.py):
the command that produced the figures and the machine it ran on, since both change the numbers.
"""

from __future__ import annotations

import os
import platform
import shlex
import sys
from collections.abc import Sequence


def results_header(name: str, module: str, argv: Sequence[str] | None) -> str:
    """`# name`, the command line (as `python -m module ...`; argv None: this process's) and the
    machine, then a blank line."""
    args = list(sys.argv[1:] if argv is None else argv)
    command = shlex.join(["python", "-m", module, *args])
    return (
        f"# {name}\n\n- command: `{command}`\n"
        f"- machine: {platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}\n\n"
    )
