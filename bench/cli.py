"""`fleetgate bench SCENARIO [--quick] [scenario options]`: a registry of scenario modules.

Each scenario module exposes `main(argv) -> int` and is also runnable as `python -m bench.<module>`.
Run through this command, every scenario leaves its markdown table under `bench/results/`: the
ones marked `own_report` write their tables and plots themselves, the others' printed tables are kept.
"""

from __future__ import annotations

import argparse
import importlib
from dataclasses import dataclass

from bench import report


@dataclass(frozen=True, slots=True)
class Scenario:
    module: str
    about: str
    own_report: bool = False  # writes its own files under bench/results/


SCENARIOS: dict[str, Scenario] = {
    "routing": Scenario(
        "bench.routing",
        "the headline: TTFT under bursts, Fleetgate vs round-robin/least-conn/random/peers",
        own_report=True,
    ),
    "overhead": Scenario(
        "bench.proxy_overhead",
        "the gateway's added latency and max rps vs direct calls; ext_proc pick path",
        own_report=True,
    ),
    "global": Scenario(
        "bench.global_bench",
        "failover time, rate-limit accuracy across replicas, cost shaping, global hop, control-plane faults",
        own_report=True,
    ),
    "throughput": Scenario(
        "bench.throughput",
        "data-plane capacity: req/s c64, added ms, 500/2,000 streams, CPU and RSS, every router",
        own_report=True,
    ),
    "faults": Scenario(
        "bench.faults_bench",
        "pod faults x outcome (503/500/429, hung, slow, killed, frozen, flapping), ejection on vs off",
        own_report=True,
    ),
    "sim-validate": Scenario("bench.sim_validate", "the simulator measured against its hardware profile"),
    "promtext": Scenario("bench.promtext_bench", "targeted Prometheus-text parse of a real-size vLLM body"),
    "pick": Scenario("bench.pick_bench", "microseconds per pick at 10/100/1000 pods"),
    "pick-sim": Scenario("bench.pick_sim", "routing quality per profile in simulated time (no wall clock)"),
    "capacity": Scenario("bench.capacity_bench", "capacity report aggregation and the gRPC report path"),
    "scale": Scenario(
        "bench.scale",
        "control-plane cost curves: pick, scrape, build_report, router report and selection by fleet size",
        own_report=True,
    ),
    "estimate": Scenario(
        "bench.estimate_accuracy", "the agent's TTFT estimate vs measured TTFT", own_report=True
    ),
    "loadgen": Scenario(
        "bench.outside_loadgen",
        "routing scenarios driven by guidellm next to the built-in client (--install sets it up)",
        own_report=True,
    ),
}


def add_arguments(parser: argparse.ArgumentParser) -> None:
    lines = [f"  {n:<13} {s.about}" for n, s in SCENARIOS.items()]
    parser.formatter_class = argparse.RawDescriptionHelpFormatter
    parser.epilog = "scenarios:\n" + "\n".join(lines)
    parser.add_argument(
        "scenario", choices=sorted(SCENARIOS), metavar="SCENARIO", help="which benchmark (listed below)"
    )
    parser.add_argument("--quick", action="store_true", help="a shorter run that still shows the effect")
    parser.add_argument("rest", nargs=argparse.REMAINDER, help="options passed to the scenario")


def run(args: argparse.Namespace) -> int:
    scenario = SCENARIOS[args.scenario]
    module = importlib.import_module(scenario.module)
    argv = list(args.rest)
    if args.quick and "--quick" not in argv:
        argv.append("--quick")
    if scenario.own_report:
        return int(module.main(argv))
    name = args.scenario.replace("-", "_") + ("_quick" if "--quick" in argv else "")
    header = report.results_header(args.scenario, ["fleetgate", "bench", args.scenario, *argv])
    with report.tee_to_results(name, header, report.RESULTS_DIR):
        return int(module.main(argv))
