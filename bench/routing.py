"""The headline benchmark: TTFT under bursty traffic, Fleetgate vs the balancers people use instead.

One arrival trace (Poisson base with spikes; short chats and long generations; shared system
prompts; LoRA adapters with fewer slots than adapters) is replayed against the same simulated
fleet once per policy. Each policy gets a fresh fleet (cold caches, no adapters resident) so no
run inherits another's warm state. Fleetgate's baselines run through the very same gateway process
(profiles `round-robin`, `least-inflight` = least connections, `random`, `reference` = the Gateway
API Inference Extension's default scorers), so proxy overhead is equal and only the policy differs;
the peer routers `sglang-router` and `vllm-router` (Rust) run in front of the same pods when
installed (`--peers` installs them into `.venv-peers`). sglang-router fronts pods that present as
SGLang (same engine, SGLang's endpoints and metrics, so its load polling and model discovery work as
against real SGLang workers); vllm-router fronts vLLM pods. Every policy is replayed by the same
client; per-pod load and request counts come from the pods' own /metrics.

The workloads are `bench.routing_scenarios` (`--scenario NAME`, default `lora-scarce`, or `all`).
Each peer runs twice: on its defaults (`sglang:cache_aware`) and tuned (`sglang:cache_aware@tuned`)
with the flags in `PEER_TUNING`, chosen from the peers' `--help` for pods of this size.

    fleetgate bench routing [--scenario NAME|all] [--quick] [--policies a,b,...] [--peers]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import dataclasses
import json
import math
import os
import platform
import shlex
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import yaml

from bench import procs, routing_scenarios
from bench.loadgen import Result, replay
from bench.report import RESULTS_DIR
from bench.routing_scenarios import MODEL, PodGroup, RoutingScenario
from bench.stats import Summary, coefficient_of_variation, summarise
from bench.trace import TraceRequest, TraceSpec, generate
from cluster_gateway.scheduling.pod_speed import SPEED_ANNOTATION
from cluster_gateway.scheduling.profiles import BUILTIN_PROFILES
from common.promtext import parse_families
from modelsim.profiles import get_profile

ROOT = Path(__file__).resolve().parent.parent
PEERS_VENV = ROOT / ".venv-peers"
# Bench-only profiles: a built-in one plus an opt-in plugin, defined from the built-in so they
# follow its weights; run by name with --policies (never in the default lists).
OPT_IN_PROFILES: dict[str, tuple[str, str]] = {"latency+kv_fit": ("latency", "kv_fit")}
FLEETGATE_PROFILES = (
    "latency",
    "throughput",
    "reference",
    "least-inflight",
    "random",
    "round-robin",
    *OPT_IN_PROFILES,
)
# policies each peer's --policy accepts (sglang-router 0.3: random, round_robin, cache_aware, power_of_two,
# manual; vllm-router 0.1: also kv_aware, consistent_hash, sticky_least_loaded, which need KV events or
# session keys the trace does not carry). power_of_two needs at least 2 workers in both.
PEER_BASE_POLICIES = ("sglang:cache_aware", "sglang:power_of_two", "vllm:cache_aware", "vllm:power_of_two")
# A competent operator's settings for 8 pods that each run at most 64-256 sequences, the same for
# every scenario (an operator does not retune per workload). From both routers' --help:
# - cache_aware balances only when (max_load - min_load) > abs AND max_load > min_load * rel, with
#   load = the router's own in-flight count per worker; the defaults (64, 1.5) never trigger when a
#   pod runs at most 64 sequences, so a hot prefix stays pinned to one pod. 4 and 1.2 make it spread
#   once a pod is 4 requests and 20% ahead; --cache-threshold stays at its 0.3 (a shared 1,200-token
#   system prompt already matches far above it).
# - power_of_two compares loads the router polls from each worker (/get_load, /metrics) every
#   --worker-startup-check-interval seconds (default 30: stale by a whole burst); 1 s is the
#   shortest the flag takes.
PEER_TUNING: dict[str, tuple[str, ...]] = {
    "cache_aware": ("--balance-abs-threshold", "4", "--balance-rel-threshold", "1.2"),
    "power_of_two": ("--worker-startup-check-interval", "1"),
}
TUNED = "@tuned"
PEER_POLICIES = PEER_BASE_POLICIES + tuple(p + TUNED for p in PEER_BASE_POLICIES)
# the quick form's peers: both on defaults (cache_aware, each peer's default policy) and every tuned row
QUICK_PEERS = ("sglang:cache_aware", "vllm:cache_aware", *(p + TUNED for p in PEER_BASE_POLICIES))
# peers read a HuggingFace tokenizer for a discovered model; keep any hub fetch on loopback (it fails fast).
# RUST_LOG: vllm-router 0.1 logs every power-of-two pick at info even with --log-level warning.
PEER_ENV = {"HF_HUB_OFFLINE": "1", "HF_ENDPOINT": "http://127.0.0.1:9", "RUST_LOG": "warn"}


@dataclass(slots=True)
class Setup:
    scenario: RoutingScenario
    time_scale: float
    trace: TraceSpec

    @property
    def pods(self) -> int:
        return self.scenario.pod_count


@dataclass(slots=True)
class PolicyRun:
    policy: str
    results: list[Result]
    wall_s: float
    load: dict[str, list[tuple[float, float]]] = field(default_factory=dict)  # pod → (t, running+waiting)
    kv: dict[str, list[float]] = field(default_factory=dict)
    pod_requests: dict[str, int] = field(default_factory=dict)  # pod → requests it finished (its /metrics)
    summary: Summary | None = None
    failure: str = ""  # why the run is not a measurement (front end did not start, every request failed)
    machine_load: float = math.nan  # the higher 1-minute load average at this policy's start and end


def _all_workers_healthy(pod_urls: list[str]) -> Callable[[httpx.Response], bool]:
    """Both peers answer GET /workers with {"workers": [{"url", "is_healthy", ...}]}."""

    def check(resp: httpx.Response) -> bool:
        healthy = {w.get("url") for w in resp.json().get("workers", []) if w.get("is_healthy")}
        return healthy >= set(pod_urls)

    return check


def _log_tail(log: Path, lines: int = 3) -> str:
    try:
        text = log.read_text(errors="replace")
    except OSError:
        return ""
    tail = [ln.strip() for ln in text.splitlines() if ln.strip()][-lines:]
    return " | ".join(tail)[-300:]


@contextlib.contextmanager
def _process(
    cmd: list[str], log: Path, env: dict[str, str] | None = None
) -> Iterator[subprocess.Popen[bytes]]:
    """`cmd` with its output in `log`, not a pipe: a peer router's log is read after the run, for the
    failure note, and a file never fills up and stalls it."""
    with log.open("wb") as out:
        proc = subprocess.Popen(
            cmd, stdout=out, stderr=subprocess.STDOUT, cwd=ROOT, env={**os.environ, **(env or {})}
        )
        try:
            yield proc
        finally:
            procs.stop(proc)


def _pod_entry(group: PodGroup, time_scale: float, engine: str) -> dict[str, object]:
    entry: dict[str, object] = {
        "profile": group.profile,
        "model": MODEL,
        "adapters": list(group.adapters),
        "maxLora": group.max_lora,
        "timeScale": time_scale,
        "replicas": group.replicas,
        "metricsFormat": engine,
    }
    if group.kv_capacity_tokens:
        entry["kvCapacityTokens"] = group.kv_capacity_tokens
    if group.max_num_seqs:
        entry["maxNumSeqs"] = group.max_num_seqs
    return entry


def _sim_command(setup: Setup, workdir: Path, engine: str = "vllm") -> list[str]:
    entries = [_pod_entry(g, setup.time_scale, engine) for g in setup.scenario.pods]
    spec = workdir / "pods.yaml"
    spec.write_text(yaml.safe_dump({"pods": entries}))
    return [
        sys.executable,
        "-m",
        "fleetgate",
        "sim",
        "--pod-spec",
        str(spec),
        "--base-port",
        "0",
        "--log-level",
        "warning",
    ]


def _opt_in_profiles() -> dict[str, dict[str, object]]:
    """`latency+kv_fit`: `latency`'s weights and filter chain with the `kv_fit` filter appended."""
    out: dict[str, dict[str, object]] = {}
    for name, (base, plugin) in OPT_IN_PROFILES.items():
        spec = BUILTIN_PROFILES[base]
        out[name] = {"weights": dict(spec.weights), "filters": [*spec.filters, plugin]}
    return out


def pod_speeds(scenario: RoutingScenario, time_scale: float) -> list[float]:
    """Each pod's prefill tokens per second, in pod order, from its simulated GPU's profile: what an
    operator puts in the `fleetgate.io/prefill-tokens-per-second` annotation of each deployment."""
    return [
        get_profile(g.profile).expected_prefill_tok_s() / time_scale
        for g in scenario.pods
        for _ in range(g.replicas)
    ]


def _endpoints(pod_urls: list[str], speeds: list[float] | None) -> list[object]:
    """Static endpoints; with the speed annotation where the pool mixes GPUs (a uniform pool's
    annotations would change nothing, so it has none)."""
    if not speeds or len(set(speeds)) < 2:
        return list(pod_urls)
    return [
        {"url": u, "annotations": {SPEED_ANNOTATION: f"{s:.0f}"}}
        for u, s in zip(pod_urls, speeds, strict=True)
    ]


def _gateway_command(
    pod_urls: list[str], port: int, workdir: Path, time_scale: float, speeds: list[float] | None = None
) -> list[str]:
    cfg = {
        "discovery": {"static": {"endpoints": _endpoints(pod_urls, speeds)}},
        "scheduling": {
            "defaultProfile": "latency",
            # uniform random among pods that serve the model (zero weights → equal scores)
            "profiles": {
                "random": {"weights": {}, "filters": ["model", "healthy"], "picker": "weighted_random"},
                **_opt_in_profiles(),
            },
        },
        # the simulator runs time_scale times slower than a GPU; the admission deadline scales with it
        "admission": {"queueTimeoutMs": int(60_000 * time_scale)},
        # a non-streamed long generation sends its first byte at its end: past firstByteTimeoutS the
        # gateway would retry it on another pod, work the peers (request timeout 1800 s, no retry on a
        # slow answer) never duplicate; the bench compares routing, so neither side retries slowness
        "proxy": {"readTimeoutS": 900, "firstByteTimeoutS": 900 * time_scale},
    }
    path = workdir / "gateway.yaml"
    path.write_text(yaml.safe_dump(cfg))
    return [
        sys.executable,
        "-m",
        "fleetgate",
        "gateway",
        "--config",
        str(path),
        "--port",
        str(port),
        "--log-level",
        "WARNING",
    ]


def _peer_engine(policy: str) -> str:
    """The engine flavour the peer's pods present: each peer fronts the server it was built for."""
    return "sglang" if policy.startswith("sglang:") else "vllm"


def peer_flags(policy: str) -> tuple[str, ...]:
    """The tuning flags a `family:policy@tuned` row adds to the peer's defaults (none for a default row)."""
    if not policy.endswith(TUNED):
        return ()
    return PEER_TUNING.get(policy.split(":", 1)[1].removesuffix(TUNED), ())


def _peer_exe(policy: str) -> Path:
    """The peer router's executable in .venv-peers (it may not be installed)."""
    family = policy.removesuffix(TUNED).split(":", 1)[0]
    return PEERS_VENV / "bin" / ("sglang-router" if family == "sglang" else "vllm-router")


def _peer_command(
    policy: str, pod_urls: list[str], port: int, metrics_port: int | None = None
) -> list[str] | None:
    """The peer's own CLI; None when it is not installed in .venv-peers.

    Defaults are kept (retries, circuit breakers, request timeout 1800 s) except logging at warning:
    both log every routing decision at info, which on 2 shared cores would slow the very run it logs.
    """
    family, pol = policy.removesuffix(TUNED).split(":", 1)
    exe = _peer_exe(policy)
    if not exe.exists():
        return None
    common = ["--host", "127.0.0.1", "--port", str(port), "--policy", pol, "--worker-urls", *pod_urls]
    # both bind a Prometheus listener on 29000 by default: two runs (or anything else there) would collide
    metrics = metrics_port if metrics_port is not None else procs.free_port()
    common += ["--prometheus-host", "127.0.0.1", "--prometheus-port", str(metrics), *peer_flags(policy)]
    if family == "sglang":
        return [str(exe), "launch", *common, "--log-level", "warn"]
    return [str(exe), *common, "--log-level", "warning"]


# peer -> (pip requirement, the executable it installs)
PEER_PACKAGES = {
    "sglang-router": ("sglang-router", "sglang-router"),
    "vllm-router": ("vllm-router", "vllm-router"),
    "litellm": ("litellm[proxy]", "litellm"),
}


def install_peers(litellm: bool = False) -> None:
    """Peer routers go in their own venv so their dependencies never touch Fleetgate's. Only the
    missing ones are installed (LiteLLM proxy only when asked: the throughput bench's peer)."""
    if not PEERS_VENV.exists():
        subprocess.run([sys.executable, "-m", "venv", str(PEERS_VENV)], check=True)
    wanted = [p for p in PEER_PACKAGES if litellm or p != "litellm"]
    missing = [PEER_PACKAGES[p][0] for p in wanted if not (PEERS_VENV / "bin" / PEER_PACKAGES[p][1]).exists()]
    if missing:
        subprocess.run([str(PEERS_VENV / "bin" / "pip"), "install", "-q", *missing], check=True)


# per engine flavour: (running, waiting, KV use 0..1, finished requests counter)
POD_METRICS = {
    "vllm": (
        "vllm:num_requests_running",
        "vllm:num_requests_waiting",
        "vllm:kv_cache_usage_perc",
        "vllm:request_success_total",
    ),
    "sglang": (
        "sglang:num_running_reqs",
        "sglang:num_queue_reqs",
        "sglang:token_usage",
        "sglang:num_requests_total",
    ),
}


async def _sample_pods(
    pod_urls: list[str], run: PolicyRun, stop: asyncio.Event, t0: float, engine: str = "vllm"
) -> None:
    """Every pod's running+waiting and KV use twice a second, the same way whatever routes to it."""
    wanted = POD_METRICS[engine][:3]
    async with httpx.AsyncClient(timeout=2.0) as client:
        while not stop.is_set():
            for url in pod_urls:
                try:
                    body = (await client.get(url + "/metrics")).content
                except httpx.HTTPError:
                    continue
                fams = parse_families(body, wanted)
                load = sum(s.value for f in wanted[:2] for s in fams.get(f, []))
                kv = sum(s.value for s in fams.get(wanted[2], []))
                run.load.setdefault(url, []).append((time.perf_counter() - t0, load))
                run.kv.setdefault(url, []).append(kv)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), 0.5)


def pod_request_counts(pod_urls: list[str], engine: str = "vllm") -> dict[str, int]:
    """Requests each pod finished, from its own counter: proof of where the front end sent traffic."""
    name = POD_METRICS[engine][3]
    out: dict[str, int] = {}
    for url in pod_urls:
        try:
            body = httpx.get(url + "/metrics", timeout=5.0).content
        except httpx.HTTPError:
            continue
        out[url] = int(sum(s.value for s in parse_families(body, (name,)).get(name, [])))
    return out


def _progress(policy: str) -> Callable[[int, int], None]:
    last = [0.0]

    tty = sys.stderr.isatty()

    def show(done: int, total: int) -> None:
        now = time.monotonic()
        if now - last[0] > (1 if tty else 10) or done == total:
            last[0] = now
            end = "" if tty and done < total else "\n"
            print(f"\r  {policy:<22} {done:>5}/{total} requests done", end=end, file=sys.stderr, flush=True)

    return show


class _PortTaken(RuntimeError):
    """The simulator or the front end exited before serving because a port picked as free was taken
    between the check and the bind (a shared machine); the run is retried on other ports."""


class _SimDidNotStart(_PortTaken):
    """The simulator exited before serving (usually a port of its block taken)."""


def run_policy(
    policy: str, setup: Setup, trace_reqs: list[TraceRequest], workdir: Path, attempts: int = 3
) -> PolicyRun | None:
    """One policy on a fresh fleet; None if its peer is not installed. A front end that does not start
    comes back as a run with `failure` set (and its log named), never as a silent zero-error run. A
    simulator that does not start, or a front end whose port was taken, is retried on other ports,
    then raised."""
    load_before = os.getloadavg()[0]
    for attempt in range(1, attempts + 1):
        try:
            run = _run_policy_once(policy, setup, trace_reqs, workdir)
            if run is not None:
                run.machine_load = max(load_before, os.getloadavg()[0])
            return run
        except _PortTaken as exc:
            if attempt == attempts:
                raise
            print(f"  {policy}: {exc}; retrying on other ports", file=sys.stderr)
    return None


def _run_policy_once(
    policy: str, setup: Setup, trace_reqs: list[TraceRequest], workdir: Path
) -> PolicyRun | None:
    front_port = procs.free_port()
    front_url = f"http://127.0.0.1:{front_port}"
    tag = policy.replace(":", "_")
    is_peer = policy not in FLEETGATE_PROFILES
    engine = _peer_engine(policy) if is_peer else "vllm"
    if is_peer and not _peer_exe(policy).exists():
        print(f"  {policy}: not installed (run with --peers), skipped", file=sys.stderr)
        return None
    front_log, sim_log = workdir / f"front-{tag}.log", workdir / f"sim-{tag}.log"
    run = PolicyRun(policy, [], 0.0)
    with _process(_sim_command(setup, workdir, engine), sim_log) as sim:
        try:
            # each pod binds port 0 and prints where it listens, in pod order
            pod_urls = procs.expect_in_file(sim_log, procs.SIM_LISTENING, setup.pods, sim, timeout=30)
            for u in pod_urls:
                procs.wait_http(u + "/health", 30, sim)
        except RuntimeError as exc:
            raise _SimDidNotStart(f"simulator did not start: {exc}: {_log_tail(sim_log)}") from None
        env: dict[str, str] = {}
        if is_peer:
            peer = _peer_command(policy, pod_urls, front_port)
            assert peer is not None  # installed: checked above
            cmd, headers, env = peer, {}, PEER_ENV
            # the peers' health means "all workers registered and healthy", not just "port open"
            ready_url, ready_check = front_url + "/workers", _all_workers_healthy(pod_urls)
        else:
            speeds = pod_speeds(setup.scenario, setup.time_scale)
            cmd = _gateway_command(pod_urls, front_port, workdir, setup.time_scale, speeds)
            headers = {"x-fleetgate-profile": policy}
            ready_url, ready_check = front_url + "/v1/models", None
        with _process(cmd, front_log, env) as front:
            try:
                procs.wait_http(ready_url, 60, front, check=ready_check)
                procs.wait_http(front_url + "/v1/models", 10, front)
            except RuntimeError as exc:
                tail = _log_tail(front_log)
                if "Address already in use" in tail:  # its port was taken after the check: try others
                    raise _PortTaken(f"{policy} did not start: {tail}") from None
                run.failure = f"did not start: {exc}; log {front_log}: {tail}"
                return run
            time.sleep(0.5)  # a few scrapes so the gateway sees every pod

            async def go() -> None:
                stop = asyncio.Event()
                t0 = time.perf_counter()
                sampler = asyncio.create_task(_sample_pods(pod_urls, run, stop, t0, engine))
                run.results = await replay(front_url, trace_reqs, headers=headers, progress=_progress(policy))
                run.wall_s = time.perf_counter() - t0
                stop.set()
                await sampler

            asyncio.run(go())
            run.pod_requests = pod_request_counts(pod_urls, engine)
            if front.poll() is not None:
                run.failure = f"exited with {front.returncode} during the run; log {front_log}"
    per_pod_busy = [sum(v for _, v in series) / max(1, len(series)) for series in run.load.values()]
    run.summary = summarise(policy, run.results, run.wall_s, coefficient_of_variation(per_pod_busy))
    failed = [r for r in run.results if not r.ok]
    if run.results and len(failed) == len(run.results) and not run.failure:
        first = failed[0]
        run.failure = f"every request failed (first: {first.status} {first.error[:150]!r}); log {front_log}"
    return run


def _fmt(x: float) -> str:
    return "n/a" if math.isnan(x) else f"{x:.2f}"


def _vs(value: float, base: float) -> str:
    if math.isnan(value) or math.isnan(base) or base <= 0:
        return "n/a"
    return f"{value / base:.2f}x ({value / base - 1:+.0%})"


def markdown(runs: Sequence[PolicyRun], setup: Setup, command: str, n_requests: int) -> str:
    base = next((r.summary for r in runs if r.policy == "round-robin" and r.summary), None)
    sc, tr = setup.scenario, setup.trace
    fleet = ", ".join(
        f"{g.replicas}x `{g.profile}`"
        + (f" (KV pool {g.kv_capacity_tokens} tokens)" if g.kv_capacity_tokens else "")
        + (f" with {len(g.adapters)} adapters, max_lora {g.max_lora}" if g.adapters else "")
        for g in sc.pods
    )
    prompts = f"{tr.system_prompt_tokens}" + (
        f"-{tr.system_prompt_tokens_max}" if tr.system_prompt_tokens_max > tr.system_prompt_tokens else ""
    )
    lines = [
        f"## routing `{sc.name}`: {sc.about}",
        "",
        f"- command: `{command}`",
        f"- machine: {platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}",
        f"- fleet: {fleet}; time scale {setup.time_scale}x "
        f"(every simulated GPU duration is {setup.time_scale}x longer; latencies below are in real, scaled "
        f"seconds — divide by {setup.time_scale} for GPU-equivalent time)",
        f"- trace: {n_requests} requests over {tr.duration_s:.0f}s, base {tr.base_rps} rps"
        + (
            f" with {tr.burst_factor}x bursts of {tr.burst_len_s:.0f}s every {tr.burst_every_s:.0f}s"
            if tr.burst_factor > 1
            else " (no bursts)"
        )
        + f", {tr.long_fraction:.0%} long generations, {tr.system_prompts} shared {prompts}-token system "
        f"prompts, user turns {tr.user_tokens[0]}-{tr.user_tokens[1]} tokens"
        + (
            f", {tr.huge_fraction:.0%} {tr.huge_tokens[0]}-{tr.huge_tokens[1]}-token documents"
            if tr.huge_fraction
            else ""
        )
        + f", {tr.adapter_fraction:.0%} LoRA requests, seed {tr.seed}",
        "- peer rows: `@tuned` adds "
        + "; ".join(f"`{' '.join(v)}` to `{k}`" for k, v in PEER_TUNING.items())
        + ", the rest are the peer's defaults",
        "",
        "| policy | TTFT p50 (s) | TTFT p90 (s) | TTFT p99 (s) | TTFT mean (s) | e2e p50 (s) | e2e p99 (s) "
        "| output tok/s | load CV | errors | TTFT p90 vs RR | TTFT p99 vs RR | TTFT mean vs RR | requests per pod "
        "| machine load |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    failures: list[str] = []
    for r in runs:
        if r.failure:
            failures.append(f"- **{r.policy} FAILED**: {r.failure}")
        s = r.summary
        if s is None:
            lines.append(f"| {r.policy} | FAILED (see below) |" + " |" * 13)
            continue
        ratio90 = _vs(s.ttft_p90, base.ttft_p90 if base else math.nan)
        ratio99 = _vs(s.ttft_p99, base.ttft_p99 if base else math.nan)
        ratio_mean = _vs(s.ttft_mean, base.ttft_mean if base else math.nan)
        lines.append(
            f"| {s.policy} | {_fmt(s.ttft_p50)} | {_fmt(s.ttft_p90)} | {_fmt(s.ttft_p99)} | {_fmt(s.ttft_mean)} "
            f"| {_fmt(s.e2e_p50)} | {_fmt(s.e2e_p99)} | {s.output_tok_per_s:.0f} | {_fmt(s.utilisation_cv)} "
            f"| {s.errors}{' FAILED' if r.failure else ''} | {ratio90} | {ratio99} | {ratio_mean} "
            f"| {'/'.join(str(r.pod_requests[u]) for u in sorted(r.pod_requests)) or 'n/a'} "
            f"| {_fmt(r.machine_load)} |"
        )
    if failures:
        lines += ["", *failures]
    lines += [
        "",
        "`vs RR` is the ratio to round-robin (what a Kubernetes Service does) and, in brackets, the change "
        "(-84% = 84% lower than round-robin). "
        "`load CV` is the coefficient of variation across pods of each pod's mean running+waiting requests "
        "(lower = more even GPU use). `requests per pod` is each pod's own finished-request counter "
        "(its /metrics) after the run: where the front end really sent the trace. `machine load` is the "
        "higher of the 1-minute load averages at the policy's start and end "
        f"({os.cpu_count()} cores: above ~2 the simulator competes for CPU and every latency stretches).",
    ]
    return "\n".join(lines) + "\n"


def plots(runs: Sequence[PolicyRun], out_dir: Path, name: str = "routing") -> list[Path]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    files: list[Path] = []
    fig, ax = plt.subplots(figsize=(8, 5))
    for r in runs:
        ttft = sorted(x.ttft_s for x in r.results if x.ok and x.ttft_s is not None)
        if ttft:
            ax.plot(ttft, [i / len(ttft) for i in range(1, len(ttft) + 1)], label=r.policy)
    ax.set_xscale("log")
    ax.set_xlabel("TTFT (s, log scale)")
    ax.set_ylabel("fraction of requests")
    ax.set_title("TTFT distribution per policy (same trace)")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend()
    p = out_dir / f"{name}_ttft_cdf.png"
    fig.tight_layout()
    fig.savefig(p, dpi=110)
    plt.close(fig)
    files.append(p)

    n = len(runs)
    fig, axes = plt.subplots(n, 1, figsize=(9, 2.2 * n), sharex=True, squeeze=False)
    for ax, r in zip(axes[:, 0], runs, strict=True):
        for i, (_, series) in enumerate(sorted(r.load.items())):
            ax.plot([t for t, _ in series], [v for _, v in series], linewidth=0.8, label=f"pod {i}")
        ax.set_title(f"{r.policy}: running+waiting requests per pod", fontsize=9)
        ax.grid(True, alpha=0.3)
    axes[-1, 0].set_xlabel("time (s)")
    fig.tight_layout()
    p = out_dir / f"{name}_pod_load.png"
    fig.savefig(p, dpi=100)
    plt.close(fig)
    files.append(p)
    return files


def _policies(args: argparse.Namespace) -> list[str]:
    if args.policies:
        return [p.strip() for p in args.policies.split(",") if p.strip()]
    if args.quick:
        wanted = ["round-robin", "reference", "latency", *QUICK_PEERS]
    else:
        wanted = [
            "round-robin",
            "least-inflight",
            "random",
            "reference",
            "throughput",
            "latency",
            *PEER_POLICIES,
        ]
    return [p for p in wanted if p in FLEETGATE_PROFILES or _peer_exe(p).exists()]


def run_to_json(run: PolicyRun) -> dict[str, object]:
    """Everything the table and plots need, so a later `--merge` run can redraw them with this run in."""
    return {
        "policy": run.policy,
        "wall_s": run.wall_s,
        "failure": run.failure,
        "pod_requests": run.pod_requests,
        "machine_load": run.machine_load,
        "summary": dataclasses.asdict(run.summary) if run.summary is not None else None,
        "results": [dataclasses.astuple(r) for r in run.results],
        "load": {u: [[round(t, 2), v] for t, v in series] for u, series in run.load.items()},
    }


def run_from_json(d: dict[str, Any]) -> PolicyRun:
    run = PolicyRun(d["policy"], [Result(*r) for r in d["results"]], d["wall_s"])
    run.failure = d["failure"]
    run.pod_requests = dict(d["pod_requests"])
    run.machine_load = float(d.get("machine_load", math.nan))
    run.load = {u: [(t, v) for t, v in series] for u, series in d["load"].items()}
    run.summary = Summary(**d["summary"]) if d["summary"] is not None else None
    return run


def _merged(runs: list[PolicyRun], path: Path, scenario: str, quick: bool, requests: int) -> list[PolicyRun]:
    """This invocation's runs plus the other policies of an earlier run of the same scenario and trace,
    in the earlier run's order (new policies at the end)."""
    try:
        old = json.loads(path.read_text())
    except (OSError, ValueError):
        return runs
    if (old.get("scenario"), old.get("quick"), old.get("requests")) != (scenario, quick, requests):
        print(f"  --merge: {path} is another scenario or trace; not merged", file=sys.stderr)
        return runs
    fresh = {r.policy: r for r in runs}
    out = [fresh.pop(d["policy"]) if d["policy"] in fresh else run_from_json(d) for d in old.get("runs", [])]
    return out + list(fresh.values())


def _summary_record(run: PolicyRun) -> dict[str, object]:
    s = run.summary
    if s is None:
        return {"failure": run.failure}
    return {
        "ttft_p50": s.ttft_p50,
        "ttft_p90": s.ttft_p90,
        "ttft_p99": s.ttft_p99,
        "ttft_mean": s.ttft_mean,
        "errors": s.errors,
        "requests": s.requests,
        "failure": run.failure,
        "pod_requests": [run.pod_requests[u] for u in sorted(run.pod_requests)],
        "machine_load": run.machine_load,
    }


def run_scenario(
    scenario: RoutingScenario, policies: Sequence[str], args: argparse.Namespace, out_dir: Path, command: str
) -> tuple[list[PolicyRun], str]:
    """Every policy on a fresh fleet with the scenario's trace; writes its table and plots."""
    trace_spec = scenario.trace_for(args.quick, seed=args.seed, duration_s=args.duration)
    if args.rps:
        trace_spec.base_rps = args.rps
    setup = Setup(scenario=scenario, time_scale=args.time_scale, trace=trace_spec)
    trace_reqs = generate(trace_spec)
    print(
        f"routing {scenario.name}: {len(trace_reqs)} requests over {trace_spec.duration_s:.0f}s, "
        f"policies: {', '.join(policies)}",
        file=sys.stderr,
    )
    runs: list[PolicyRun] = []
    started = time.monotonic()
    load_before = os.getloadavg()[0]
    with tempfile.TemporaryDirectory(prefix="fleetgate-bench-") as tmp:
        for policy in policies:
            run = run_policy(policy, setup, trace_reqs, Path(tmp))
            if run is None:
                continue
            runs.append(run)
            s = run.summary
            if s is not None:
                print(
                    f"  {policy}: TTFT p50 {_fmt(s.ttft_p50)} p90 {_fmt(s.ttft_p90)} p99 {_fmt(s.ttft_p99)} "
                    f"errors {s.errors}/{s.requests}, requests per pod {sorted(run.pod_requests.values())}",
                    file=sys.stderr,
                )
            if run.failure:
                # the temp dir goes away; keep the failed run's logs next to the results
                for log in Path(tmp).glob(f"*-{policy.replace(':', '_')}.log"):
                    shutil.copy(log, out_dir / log.name)
                run.failure = run.failure.replace(tmp, str(out_dir))
                print(f"  {policy}: FAILED: {run.failure}", file=sys.stderr)
    wall = time.monotonic() - started
    load_after = os.getloadavg()[0]
    name = f"routing_{scenario.name}" + ("_quick" if args.quick else "")
    if args.merge:
        runs = _merged(runs, out_dir / f"{name}.json", scenario.name, bool(args.quick), len(trace_reqs))
    md = markdown(runs, setup, command, len(trace_reqs))
    md += (
        f"\nwall time: {wall:.0f} s; 1-min load average {load_before:.1f} at the start, {load_after:.1f} at "
        f"the end ({os.cpu_count()} cores{'; a loaded machine' if max(load_before, load_after) > 2.5 else ''})\n"
    )
    (out_dir / f"{name}.md").write_text(md)
    record = {
        "scenario": scenario.name,
        "quick": bool(args.quick),
        "command": command,
        "requests": len(trace_reqs),
        "wall_s": round(wall, 1),
        "load_avg": [round(load_before, 2), round(load_after, 2)],
        "policies": {r.policy: _summary_record(r) for r in runs},
        "runs": [run_to_json(r) for r in runs],
    }
    (out_dir / f"{name}.json").write_text(json.dumps(record, separators=(",", ":")) + "\n")
    files = plots(runs, out_dir, name)
    print(md)
    print("plots: " + ", ".join(str(f) for f in files))
    return runs, md


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="fleetgate bench routing", description=__doc__.split("\n\n")[0])
    ap.add_argument(
        "--scenario",
        default=routing_scenarios.DEFAULT_SCENARIO,
        help="workload: all, or one of "
        + "; ".join(f"{s.name} ({s.about})" for s in routing_scenarios.SCENARIOS.values()).replace("%", "%%"),
    )
    ap.add_argument(
        "--quick", action="store_true", help="the scenario's short form (40 s trace), fewer policies"
    )
    ap.add_argument("--policies", help=f"comma-separated: {', '.join(FLEETGATE_PROFILES + PEER_POLICIES)}")
    ap.add_argument(
        "--peers", action="store_true", help="install sglang-router and vllm-router into .venv-peers"
    )
    ap.add_argument("--pods", type=int, help="pod count of a one-group scenario (default: the scenario's)")
    ap.add_argument("--duration", type=float, help="trace length in seconds (default: the scenario's)")
    ap.add_argument("--rps", type=float, help="base arrival rate (default: the scenario's)")
    ap.add_argument(
        "--time-scale", type=float, default=1.0, help=">1 slows every simulated GPU duration (small machines)"
    )
    ap.add_argument("--seed", type=int, help="trace seed (default: the scenario's)")
    ap.add_argument("--out", default=str(RESULTS_DIR), help="directory for the table, plots and logs")
    ap.add_argument(
        "--merge",
        action="store_true",
        help="keep the other policies of an earlier run of the same scenario and trace in the table",
    )
    args = ap.parse_args(argv)

    if args.scenario == "all":
        scenarios = list(routing_scenarios.SCENARIOS.values())
    else:
        try:
            scenarios = [routing_scenarios.get(args.scenario)]
        except ValueError as exc:
            print(exc, file=sys.stderr)
            return 2
    if args.pods is not None:
        if args.pods < 1 or any(len(s.pods) != 1 for s in scenarios):
            print("--pods: must be >= 1, and only for a scenario with one pod group", file=sys.stderr)
            return 2
        scenarios = [
            dataclasses.replace(s, pods=(dataclasses.replace(s.pods[0], replicas=args.pods),))
            for s in scenarios
        ]
    if args.peers:
        install_peers()
    policies = _policies(args)
    unknown = [p for p in policies if p not in FLEETGATE_PROFILES + PEER_POLICIES]
    if unknown:
        print(f"unknown policies: {unknown}", file=sys.stderr)
        return 2
    out_dir = Path(args.out)
    out_dir.mkdir(parents=True, exist_ok=True)
    command = shlex.join(["fleetgate", "bench", "routing", *(sys.argv[1:] if argv is None else argv)])
    failed = False
    for scenario in scenarios:
        runs, _ = run_scenario(scenario, policies, args, out_dir, command)
        failed = failed or any(r.failure for r in runs)
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
