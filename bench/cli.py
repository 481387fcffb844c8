"""`fleetgate bench SCENARIO [--quick] [scenario options]`: a registry of scenario modules.

Each scenario module exposes `main(argv) -> int`, is also runnable as `python -m bench.<module>`,
and writes its markdown table (and plots, where it has them) under `bench/results/`.
"""

from __future__ import annotations

import argparse
import importlib

SCENARIOS: dict[str, tuple[str, str]] = {
    "routing": (
        "bench.routing",
        "the headline: TTFT under bursts, Fleetgate vs round-robin/least-conn/random/peers",
    ),
    "overhead": (
        "bench.proxy_overhead",
        "the gateway's added latency and max rps vs direct calls; ext_proc pick path",
    ),
    "global": (
        "bench.global_bench",
        "failover time, rate-limit accuracy across replicas, cost shaping, global hop",
    ),
    "sim-validate": ("bench.sim_validate", "the simulator measured against its hardware profile"),
    "promtext": ("bench.promtext_bench", "targeted Prometheus-text parse of a real-size vLLM body"),
    "pick": ("bench.pick_bench", "microseconds per pick at 10/100/1000 pods"),
    "capacity": ("bench.capacity_bench", "capacity report aggregation and the gRPC report path"),
}


def add_arguments(parser: argparse.ArgumentParser) -> None:
    lines = [f"  {n:<13} {d}" for n, (_, d) in SCENARIOS.items()]
    parser.formatter_class = argparse.RawDescriptionHelpFormatter
    parser.epilog = "scenarios:\n" + "\n".join(lines)
    parser.add_argument("scenario", choices=sorted(SCENARIOS), metavar="SCENARIO")
    parser.add_argument("--quick", action="store_true", help="a shorter run that still shows the effect")
    parser.add_argument("rest", nargs=argparse.REMAINDER, help="options passed to the scenario")


def run(args: argparse.Namespace) -> int:
    module = importlib.import_module(SCENARIOS[args.scenario][0])
    argv = list(args.rest)
    if args.quick and "--quick" not in argv:
        argv.append("--quick")
    return int(module.main(argv))
