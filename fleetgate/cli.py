"""`fleetgate SUBCOMMAND ...`: a registry of subcommands, each imported only when used.

A subcommand module exposes `add_arguments(parser)` and `run(args) -> int` (the exit code).
"""

from __future__ import annotations

import argparse
import importlib
import importlib.metadata
import sys
from collections.abc import Sequence
from types import ModuleType

COMMANDS: dict[str, tuple[str, str]] = {
    "sim": ("modelsim.cli", "serve simulated model-server pods (vLLM/SGLang/TGI-compatible)"),
    "gateway": ("cluster_gateway.cli", "run a cluster gateway (Tier 1)"),
    "global-router": ("global_router.cli", "run the global router (Tier 2)"),
    "demo": ("fleetgate.demo", "start a whole local fleet: clusters, gateways, a global router"),
    "bench": ("bench.cli", "run a benchmark scenario and write its report"),
}


def version() -> str:
    """The installed distribution's version (pyproject.toml), so there is one place to bump it."""
    try:
        return importlib.metadata.version("fleetgate")
    except importlib.metadata.PackageNotFoundError:
        return "unknown (not installed: run `make demo` or `pip install -e .`)"


def _usage() -> str:
    lines = ["usage: fleetgate [--version] SUBCOMMAND [options]", "", "subcommands:"]
    lines += [f"  {name:<14} {desc}" for name, (_, desc) in COMMANDS.items()]
    lines += ["", "Run `fleetgate SUBCOMMAND --help` for its options."]
    return "\n".join(lines)


def build_parser(name: str) -> tuple[argparse.ArgumentParser, ModuleType]:
    """The parser of subcommand `name` and its module (also walked by the help-text test)."""
    module_name, desc = COMMANDS[name]
    module = importlib.import_module(module_name)
    parser = argparse.ArgumentParser(prog=f"fleetgate {name}", description=desc)
    module.add_arguments(parser)
    return parser, module


def main(argv: Sequence[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if not args or args[0] in ("-h", "--help"):
        print(_usage())
        return 0 if args else 2
    if args[0] in ("-V", "--version"):
        print(f"fleetgate {version()}")
        return 0
    name, rest = args[0], args[1:]
    if name not in COMMANDS:
        print(f"fleetgate: unknown subcommand {name!r}\n\n{_usage()}", file=sys.stderr)
        return 2
    try:
        parser, module = build_parser(name)
    except ModuleNotFoundError as exc:
        if exc.name == COMMANDS[name][0]:
            print(f"fleetgate {name}: not built yet", file=sys.stderr)
            return 2
        raise
    ns = parser.parse_args(rest)
    try:
        return int(module.run(ns))
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    raise SystemExit(main())
