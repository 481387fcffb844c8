"""Where scenario reports go: every table a scenario prints is also kept in `bench/results/NAME.md`.

Scenarios that build their own report files (routing, overhead, global) write them themselves; the
smaller ones just print markdown, and `tee_to_results` keeps a copy so `fleetgate bench X` always
leaves its latest figures on disk next to the others.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import os
import platform
import shlex
import sys
from collections.abc import Collection, Iterable, Iterator, Sequence
from pathlib import Path
from typing import TextIO

RESULTS_DIR = Path(__file__).resolve().parent / "results"


def results_header(name: str, command: Sequence[str]) -> str:
    """`# name`, the exact command and the machine: both change the numbers below them."""
    return (
        f"# {name}\n\n- command: `{shlex.join(command)}`\n"
        f"- machine: {platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}\n\n"
    )


def module_command(module: str, argv: Sequence[str] | None) -> list[str]:
    """How a scenario run as `python -m module` was invoked (argv None: this process's arguments)."""
    return ["python", "-m", module, *(sys.argv[1:] if argv is None else argv)]


def add_output_options(ap: argparse.ArgumentParser, name: str, plots: str) -> None:
    """`--out` and `--no-plots`, the same for every scenario that writes its own report."""
    ap.add_argument(
        "--out",
        type=Path,
        help=f"markdown table (default bench/results/{name}.md, {name}_quick.md with --quick); {plots}",
    )
    ap.add_argument("--no-plots", action="store_true", help="table only")


def output_path(out: Path | None, name: str, quick: bool) -> Path:
    """Where the report goes: `--out`, else bench/results/NAME[_quick].md (a quick run never
    overwrites a full run's figures)."""
    path = out or RESULTS_DIR / (f"{name}_quick.md" if quick else f"{name}.md")
    path.parent.mkdir(parents=True, exist_ok=True)
    return path


def write_results(path: Path, name: str, command: Sequence[str], table: str) -> None:
    """The report under its header, replaced whole: a crash mid-write keeps the previous figures."""
    tmp = path.with_suffix(".md.tmp")
    tmp.write_text(results_header(name, command) + table + "\n", encoding="utf-8")
    tmp.replace(path)


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def markdown_table(header: Sequence[str], rows: Iterable[Sequence[str]], right: Collection[int] = ()) -> str:
    """A markdown table; columns whose index is in `right` are right-aligned (numbers).

    Cells are escaped (`|`, newlines) so no error text or note can shift the columns after it.
    """
    lines = [header, ["---:" if i in right else "---" for i in range(len(header))], *rows]
    return "\n".join("| " + " | ".join(_cell(c) for c in line) + " |" for line in lines)


class _Tee(io.TextIOBase):
    def __init__(self, *targets: TextIO) -> None:
        self._targets = targets

    def write(self, s: str) -> int:
        for t in self._targets:
            t.write(s)
        return len(s)

    def flush(self) -> None:
        for t in self._targets:
            t.flush()


@contextlib.contextmanager
def tee_to_results(name: str, header: str, results_dir: Path = RESULTS_DIR) -> Iterator[Path]:
    """Print as usual and also write everything printed, under `header`, to results_dir/name.md."""
    results_dir.mkdir(parents=True, exist_ok=True)
    path = results_dir / f"{name}.md"
    tmp = path.with_suffix(".md.tmp")
    with tmp.open("w", encoding="utf-8") as f:
        f.write(header.rstrip() + "\n\n")
        with contextlib.redirect_stdout(_Tee(sys.stdout, f)):  # type: ignore[type-var]
            yield path
    tmp.replace(path)  # a failed run leaves the previous report in place
