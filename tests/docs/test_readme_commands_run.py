"""The README's commands, pasted into a fresh shell on a fresh clone, run as written.

Every fenced ```sh block of README.md is meant to be pasted (other blocks are ```text, ```yaml ...).
Always: each command in them is one this checkout has (a Makefile target, a `fleetgate` subcommand
whose options parse), and `make demo` installs the runtime dependencies only. With
FLEETGATE_README_FRESH=1 (`make test-readme`; not in `make test`, whose 20-minute CI budget a second
venv install from the package index would eat): the blocks run verbatim in `bash` on a copy of the checkout with no
venv on PATH, `make demo` bounded by `DEMO_ARGS` (the Makefile's hook; the demo otherwise runs until
Ctrl-C), and the endpoint each demo prints must answer. `make test` is not run from here: it is
what `.ci/run` runs, i.e. the run this test is part of.
"""

from __future__ import annotations

import os
import queue
import re
import shlex
import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path

import httpx
import pytest

from fleetgate import cli
from fleetgate.demo_fleet import BASE_MODEL

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
SH_BLOCK = re.compile(r"^```sh\n(.*?)^```$", re.M | re.S)
FRESH = os.environ.get("FLEETGATE_README_FRESH") == "1"
NOT_FROM_HERE = ("make test",)  # the CI run itself


def sh_blocks(text: str) -> list[str]:
    return SH_BLOCK.findall(text)


def commands(block: str) -> list[list[str]]:
    """Each command of a block as argv (comments dropped, `\\` continuations joined)."""
    joined = block.replace("\\\n", " ")
    return [argv for line in joined.splitlines() if (argv := shlex.split(line, comments=True))]


def test_the_readme_has_pasteable_blocks_with_the_two_commands() -> None:
    cmds = [argv for b in sh_blocks(README.read_text()) for argv in commands(b)]
    assert ["make", "demo"] in cmds and ["make", "test"] in cmds
    assert ["source", ".venv/bin/activate"] in cmds


def test_every_readme_command_exists_here() -> None:
    targets = set(re.findall(r"^([a-z][\w-]*):", (ROOT / "Makefile").read_text(), re.M))
    for argv in (a for b in sh_blocks(README.read_text()) for a in commands(b)):
        if argv[0] == "make":
            assert set(argv[1:]) <= targets, argv
        elif argv[0] == "fleetgate":
            if argv[1:] in (["--version"], ["--help"]):
                continue
            parser, _ = cli.build_parser(argv[1])
            parser.parse_args(argv[2:])  # exits 2 on an option the command does not have
        else:
            assert argv[:2] == ["source", ".venv/bin/activate"], f"a command this test does not know: {argv}"


def _copy_of_checkout(dest: Path) -> None:
    """The checkout's tracked and new files (what a clone of this commit-to-be would hold), no venv."""
    listed = subprocess.run(
        ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        cwd=ROOT, capture_output=True, check=True, timeout=60,
    ).stdout.decode()  # fmt: skip
    for rel in filter(None, listed.split("\0")):
        src = ROOT / rel
        if src.is_file():
            (dest / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, dest / rel)


def _clean_env(home: Path) -> dict[str, str]:
    """A fresh login shell's environment: this test's venv neither active nor on PATH."""
    venv_bin = str(Path(sys.prefix) / "bin")
    path = [p for p in os.environ.get("PATH", "/usr/bin:/bin").split(":") if p and p != venv_bin]
    keep = {
        k: v
        for k, v in os.environ.items()
        if k.startswith(("PIP_", "LANG", "LC_")) or k in ("HOME", "USER", "TMPDIR")
    }
    return {**keep, "PATH": ":".join(path), "HOME": os.environ.get("HOME", str(home))}


def test_make_demo_installs_runtime_dependencies_only(tmp_path: Path) -> None:
    if shutil.which("make") is None:
        pytest.skip("needs make")
    _copy_of_checkout(tmp_path)
    plan = subprocess.run(["make", "-n", "demo"], cwd=tmp_path, capture_output=True, text=True, timeout=60)
    assert plan.returncode == 0, plan.stderr
    installs = [ln for ln in plan.stdout.splitlines() if "pip install" in ln and "-e" in ln]
    assert installs == [".venv/bin/pip install -q -e '.[demo]'"], plan.stdout


class _Block:
    """One README block running in bash; stdout lines are read as they come."""

    def __init__(self, block: str, cwd: Path, env: dict[str, str]) -> None:
        self.proc = subprocess.Popen(
            ["bash", "-euo", "pipefail", "-c", block], cwd=cwd, env=env, stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
        )  # fmt: skip
        self.lines: queue.Queue[str | None] = queue.Queue()
        self.seen: list[str] = []
        threading.Thread(target=self._pump, daemon=True).start()

    def _pump(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.lines.put(line.rstrip("\n"))
        self.lines.put(None)

    def run(self, timeout_s: float) -> list[str]:
        """Wait for the end; every demo endpoint printed meanwhile is asked for its models."""
        deadline = time.monotonic() + timeout_s
        endpoint = None
        while True:
            try:
                line = self.lines.get(timeout=max(0.1, deadline - time.monotonic()))
            except queue.Empty:
                self.proc.kill()
                raise AssertionError(
                    "block still running at its deadline:\n" + "\n".join(self.seen[-40:])
                ) from None
            if line is None:
                break
            self.seen.append(line)
            if m := re.match(r"^global endpoint: (http://\S+)$", line):
                endpoint = m.group(1)
            elif (m := re.match(r"^api key: (\S+)$", line)) and endpoint:
                r = httpx.get(
                    f"{endpoint}/v1/models", headers={"authorization": f"Bearer {m.group(1)}"}, timeout=30
                )
                assert r.status_code == 200 and BASE_MODEL in {x["id"] for x in r.json()["data"]}, r.text
                self.seen.append(f"[test] {endpoint}/v1/models answered")
        assert self.proc.wait(timeout=30) == 0, "\n".join(self.seen[-60:])
        return self.seen


@pytest.mark.skipif(
    not FRESH, reason="installs a venv from the package index: make test-readme (FLEETGATE_README_FRESH=1)"
)
@pytest.mark.timeout(1200)
def test_readme_blocks_run_in_a_fresh_shell_on_a_fresh_copy(tmp_path: Path) -> None:
    clone = tmp_path / "fleetgate"
    clone.mkdir()
    _copy_of_checkout(clone)
    env = {**_clean_env(tmp_path), "DEMO_ARGS": "--duration 20 --port 0"}
    ran = 0
    for block in sh_blocks(README.read_text()):
        lines = [ln for ln in block.splitlines() if not ln.strip().startswith(NOT_FROM_HERE)]
        if not "".join(lines).strip():
            continue
        seen = _Block("\n".join(lines), clone, env).run(timeout_s=900)
        ran += 1
        if "make demo" in block or "fleetgate demo" in block:
            assert any(s.startswith("[test]") for s in seen), "the demo printed no endpoint:\n" + "\n".join(
                seen
            )
        if "fleetgate --version" in block:
            assert any(re.fullmatch(r"fleetgate \d+\.\d+\.\d+\S*", s) for s in seen), seen
    assert ran >= 2
    assert (clone / ".venv" / "bin" / "fleetgate").exists()
    assert not (clone / ".venv" / "bin" / "pytest").exists()  # the demo venv has no dev tools
