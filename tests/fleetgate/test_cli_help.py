"""Every option of `fleetgate` and of each subcommand (bench scenarios included) says what it does."""

from __future__ import annotations

import argparse
import importlib
import re
import subprocess
import sys
from collections.abc import Iterator

import pytest

from bench import cli as bench_cli
from fleetgate import cli

TOML_VERSION = re.compile(r'^version = "([^"]+)"$', re.M)


class _Captured(Exception):
    """Raised instead of parsing, carrying the parser a scenario built."""

    def __init__(self, parser: argparse.ArgumentParser) -> None:
        super().__init__(parser.prog)
        self.parser = parser


def _scenario_parser(module_name: str, monkeypatch: pytest.MonkeyPatch) -> argparse.ArgumentParser:
    """Scenarios build their parser inside `main(argv)`: stop it at `parse_args` and keep the parser."""

    def capture(self: argparse.ArgumentParser, *_: object, **__: object) -> argparse.Namespace:
        raise _Captured(self)

    with monkeypatch.context() as m:
        m.setattr(argparse.ArgumentParser, "parse_args", capture)
        with pytest.raises(_Captured) as got:
            importlib.import_module(module_name).main([])
    return got.value.parser


def _undocumented(parser: argparse.ArgumentParser) -> Iterator[str]:
    for action in parser._actions:
        if isinstance(action, argparse._HelpAction):
            continue
        if isinstance(action, argparse._SubParsersAction):
            for sub in action.choices.values():
                yield from _undocumented(sub)
            continue
        if not (action.help or "").strip() or action.help == argparse.SUPPRESS:
            yield f"{parser.prog}: {'/'.join(action.option_strings) or action.dest}"


@pytest.mark.parametrize("name", sorted(cli.COMMANDS))
def test_every_subcommand_option_has_help(name: str) -> None:
    parser, _ = cli.build_parser(name)
    assert list(_undocumented(parser)) == []


@pytest.mark.parametrize("scenario", sorted(bench_cli.SCENARIOS))
def test_every_bench_scenario_option_has_help_and_names_the_fleetgate_command(
    scenario: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    parser = _scenario_parser(bench_cli.SCENARIOS[scenario].module, monkeypatch)
    assert parser.prog == f"fleetgate bench {scenario}"
    assert "python -m" not in parser.format_help()  # the command a reader types is `fleetgate bench`
    assert list(_undocumented(parser)) == []


def test_bench_global_help_names_fleetgate_not_python_m(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as done:
        cli.main(["bench", "global", "--help"])
    assert done.value.code == 0
    out = capsys.readouterr().out
    assert out.startswith("usage: fleetgate bench global")
    assert "python -m" not in out


def test_version_is_the_pyproject_version() -> None:
    from pathlib import Path

    toml = (Path(__file__).resolve().parents[2] / "pyproject.toml").read_text()
    wanted = TOML_VERSION.search(toml)
    assert wanted
    run = subprocess.run(
        [sys.executable, "-m", "fleetgate", "--version"], capture_output=True, text=True, timeout=60
    )
    assert run.returncode == 0, run.stderr
    assert run.stdout.strip() == f"fleetgate {wanted.group(1)}"
