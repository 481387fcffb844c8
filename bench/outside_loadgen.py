"""The routing bench driven by an outside load generator (`guidellm`), side by side with the built-in one.

    fleetgate bench loadgen [--install] [--quick] [--scenarios no-adapters,lora-scarce]

The peers' own benchmarks use `guidellm` (vLLM project) or `inference-perf` (kubernetes-sigs), so a
gain measured only by Fleetgate's own client could be an artefact of that client. Here the same
simulated fleet and the same gateway (profiles `round-robin` and `latency`, each the gateway's
default profile, so no header is needed) are driven once by the built-in client (`bench.loadgen`,
replaying the seeded trace) and once by guidellm (its `replay` profile over the same trace: arrival
offsets, system prompts, user turns and output lengths as its dataset), each on a fresh fleet.

guidellm is installed into `.venv-loadgen` (`--install`). Its data loader imports PyTorch, and
PyPI's Linux PyTorch wheels pull the CUDA libraries (~3 GB installed), so the venv is large. It has
no per-request model field, so for `lora-scarce` only the trace's base-model share is driven (one
guidellm process per adapter would not fit two cores), and the table says so. `inference-perf`
0.7.0 requires Python >= 3.12 and the machine has 3.11 only, which the report states as the reason
it is skipped.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import shlex
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import yaml

from bench import procs
from bench.loadgen import replay
from bench.report import RESULTS_DIR
from bench.routing_scenarios import ADAPTERS, MODEL, SCENARIOS
from bench.stats import summarise
from bench.trace import TraceRequest, TraceSpec, generate

ROOT = Path(__file__).resolve().parent.parent
VENV = ROOT / ".venv-loadgen"
GUIDELLM = "guidellm==0.8.1"
POLICIES = ("round-robin", "latency")


@dataclass(frozen=True, slots=True)
class Scenario:
    name: str
    about: str
    trace: TraceSpec
    max_lora: int = 2
    max_num_seqs: int = 64  # the cap the first headline was measured with (vLLM's default is 256)


def _trace(duration_s: float, rps: float, adapter_fraction: float, seed: int) -> TraceSpec:
    """The routing headline's trace (`lora-scarce` in bench/routing_scenarios.py) at this rate."""
    base = SCENARIOS["lora-scarce"].trace
    return replace(base, duration_s=duration_s, base_rps=rps, adapter_fraction=adapter_fraction, seed=seed)


def scenarios(duration_s: float, rps: float, seed: int) -> dict[str, Scenario]:
    return {
        "lora-scarce": Scenario(
            "lora-scarce", "30% of requests for 6 adapters, 2 slots a pod", _trace(duration_s, rps, 0.3, seed)
        ),
        "no-adapters": Scenario("no-adapters", "base model only", _trace(duration_s, rps, 0.0, seed)),
    }


# -- installing guidellm --------------------------------------------------------------------------


def guidellm_bin() -> Path:
    return VENV / "bin" / "guidellm"


def unavailable() -> str | None:
    """Why guidellm cannot run here (None: it can)."""
    if not guidellm_bin().exists():
        return f"guidellm is not installed (run `fleetgate bench loadgen --install`: {VENV.name}, ~4 GB with PyTorch)"
    try:
        out = subprocess.run([str(guidellm_bin()), "--version"], capture_output=True, text=True, timeout=120)
    except (OSError, subprocess.TimeoutExpired) as e:
        return f"guidellm does not start: {e}"
    if out.returncode != 0:
        return f"guidellm does not start: {(out.stderr or out.stdout).strip()[-200:]}"
    return None


def install(timeout_s: float = 1200) -> str | None:
    """Create .venv-loadgen with guidellm (and its PyTorch); the reason on failure, else None."""
    py = VENV / "bin" / "python"
    steps = [
        [sys.executable, "-m", "venv", str(VENV)],
        [str(py), "-m", "pip", "install", "-q", GUIDELLM],
    ]
    deadline = time.monotonic() + timeout_s
    for cmd in steps:
        if cmd[0] == sys.executable and py.exists():
            continue
        try:
            r = subprocess.run(
                cmd, capture_output=True, text=True, timeout=max(1.0, deadline - time.monotonic())
            )
        except subprocess.TimeoutExpired:
            return f"install timed out after {timeout_s:.0f} s ({shlex.join(cmd[-2:])})"
        if r.returncode != 0:
            return f"install failed: {shlex.join(cmd[2:5])}: {(r.stderr or r.stdout).strip()[-300:]}"
    return unavailable()


def write_tokenizer(directory: Path) -> Path:
    """A local whitespace word-level tokenizer for guidellm's processor: the hub is unreachable here,
    and only guidellm's token statistics use it (the simulator counts ~4 characters a token)."""
    directory.mkdir(parents=True, exist_ok=True)
    script = (
        "import sys\n"
        "from tokenizers import Tokenizer, models, pre_tokenizers\n"
        "from transformers import PreTrainedTokenizerFast\n"
        "tok = Tokenizer(models.WordLevel({'[UNK]': 0, '[EOS]': 1}, unk_token='[UNK]'))\n"
        "tok.pre_tokenizer = pre_tokenizers.Whitespace()\n"
        "PreTrainedTokenizerFast(tokenizer_object=tok, unk_token='[UNK]', eos_token='[EOS]')"
        ".save_pretrained(sys.argv[1])\n"
    )
    subprocess.run([str(VENV / "bin" / "python"), "-c", script, str(directory)], check=True, timeout=300)
    return directory


# -- one run ---------------------------------------------------------------------------------------


@dataclass(slots=True)
class Row:
    scenario: str
    client: str
    policy: str
    requests: int
    errors: int
    ttft_p50: float
    ttft_p90: float
    ttft_p99: float
    note: str = ""


@contextlib.contextmanager
def _process(
    cmd: list[str], log: Path, env: dict[str, str] | None = None
) -> Iterator[subprocess.Popen[bytes]]:
    with log.open("wb") as out:
        proc = subprocess.Popen(
            cmd, stdout=out, stderr=subprocess.STDOUT, cwd=ROOT, env={**os.environ, **(env or {})}
        )
        try:
            yield proc
        finally:
            procs.stop(proc)


@contextlib.contextmanager
def fleet_and_gateway(sc: Scenario, pods: int, policy: str, workdir: Path) -> Iterator[str]:
    """A fresh simulated fleet and a gateway whose default profile is `policy`; yields its URL."""
    entry = {
        "profile": "l4-llama3-8b",
        "model": MODEL,
        "adapters": list(ADAPTERS),
        "maxLora": sc.max_lora,
        "maxNumSeqs": sc.max_num_seqs,
        "replicas": pods,
    }
    (workdir / "pods.yaml").write_text(yaml.safe_dump({"pods": [entry]}))
    sim = [sys.executable, "-m", "fleetgate", "sim", "--pod-spec", str(workdir / "pods.yaml")]
    sim += ["--base-port", "0", "--log-level", "warning"]  # each pod binds port 0 and says where
    with _process(sim, workdir / "sim.log") as sp:
        pod_urls = procs.expect_in_file(workdir / "sim.log", procs.SIM_LISTENING, pods, sp, timeout=60)
        for u in pod_urls:
            procs.wait_http(u + "/health", 60, sp)
        cfg = {
            "discovery": {"static": {"endpoints": pod_urls}},
            "scheduling": {"defaultProfile": policy},
            "admission": {"queueTimeoutMs": 60_000},
            "proxy": {"readTimeoutS": 900},
        }
        (workdir / "gateway.yaml").write_text(yaml.safe_dump(cfg))
        port = procs.free_port()
        gw = [sys.executable, "-m", "fleetgate", "gateway", "--config", str(workdir / "gateway.yaml")]
        gw += ["--port", str(port), "--log-level", "WARNING"]
        with _process(gw, workdir / "gateway.log") as gp:
            procs.wait_http(f"http://127.0.0.1:{port}/v1/models", 60, gp)
            time.sleep(0.5)  # a few scrapes, so the gateway sees every pod
            yield f"http://127.0.0.1:{port}"


def run_builtin(sc: Scenario, pods: int, policy: str, reqs: list[TraceRequest], workdir: Path) -> Row:
    with fleet_and_gateway(sc, pods, policy, workdir) as url:
        t0 = time.perf_counter()
        results = asyncio.run(replay(url, reqs))
        wall = time.perf_counter() - t0
    s = summarise(policy, results, wall, 0.0)
    return Row(
        sc.name, "built-in (trace replay)", policy, s.requests, s.errors, s.ttft_p50, s.ttft_p90, s.ttft_p99
    )


def guidellm_dataset(reqs: list[TraceRequest], path: Path, model: str) -> int:
    """The trace's requests for `model` as guidellm rows (arrival offset, system prompt, user text,
    output tokens); how many."""
    rows = [r for r in reqs if r.model == model]
    t0 = rows[0].at_s if rows else 0.0
    with path.open("w") as f:
        for r in rows:
            system = " ".join(c for role, c in r.messages if role == "system")
            user = " ".join(c for role, c in r.messages if role != "system")
            row = {
                "relative_timestamp": round(r.at_s - t0, 4),
                "system_prompt": system,
                "prompt": user,
                "output_tokens_count": r.max_tokens,
            }
            f.write(json.dumps(row) + "\n")
    return len(rows)


def guidellm_command(url: str, data: Path, n: int, tokenizer: Path, out: Path, seed: int) -> list[str]:
    """guidellm 0.8 `run`: replay the rows at their timestamps, streamed chat completions."""
    return [
        str(guidellm_bin()), "run",
        "--backend", f"kind=openai_http,target={url},model={MODEL},request_format=/v1/chat/completions",
        "--profile", "kind=replay,schedule_turn=timestamp",
        "--constraint", f"kind=max_requests,count={n}",
        "--tokenizer", f"kind=huggingface_auto,model={tokenizer}",
        "--data", f"kind=json_file,path={data}",
        "--seed", f"kind=static,value={seed}",
        "--output", f"kind=json,path={out}",
        "--disable-console-interactive",
    ]  # fmt: skip


def run_guidellm(
    sc: Scenario, pods: int, policy: str, reqs: list[TraceRequest], workdir: Path, tokenizer: Path
) -> Row:
    data = workdir / "data.jsonl"
    n = guidellm_dataset(reqs, data, MODEL)
    note = "" if n == len(reqs) else f"base-model share only ({n} of {len(reqs)}: one model per guidellm run)"
    out = workdir / "guidellm.json"
    log = workdir / "guidellm.log"
    env = {"HF_HUB_OFFLINE": "1", "HF_ENDPOINT": "http://127.0.0.1:9"}
    with fleet_and_gateway(sc, pods, policy, workdir) as url, log.open("wb") as f:
        cmd = guidellm_command(url, data, n, tokenizer, out, sc.trace.seed)
        r = subprocess.run(
            cmd,
            stdout=f,
            stderr=subprocess.STDOUT,
            env={**os.environ, **env},
            timeout=sc.trace.duration_s * 4 + 180,
        )
    if r.returncode != 0 or not out.exists():
        tail = log.read_text(errors="replace").strip().splitlines()[-3:]
        nan = float("nan")
        return Row(sc.name, "guidellm", policy, 0, 0, nan, nan, nan, f"failed: {' | '.join(tail)[-300:]}")
    return _guidellm_row(sc.name, policy, json.loads(out.read_text()), note)


def _guidellm_row(scenario: str, policy: str, report: dict[str, Any], note: str) -> Row:
    """TTFT percentiles (seconds), counts and guidellm's own dispatch lag from its JSON report."""
    metrics = report["benchmarks"][0]["metrics"]
    ttft = metrics["time_to_first_token_ms"]["successful"]["percentiles"]
    totals = metrics["request_totals"]
    bad = int(totals.get("errored", 0)) + int(totals.get("incomplete", 0))
    lag = metrics.get("root_dispatch_delay", {}).get("percentiles", {}).get("p95")
    if lag is not None:  # seconds late against the trace's timestamps (a loaded client sends late)
        note = "; ".join(x for x in (note, f"dispatch lag p95 {float(lag):.2f} s") if x)
    return Row(
        scenario,
        "guidellm",
        policy,
        int(totals.get("total", 0)),
        bad,
        ttft["p50"] / 1e3,
        ttft["p90"] / 1e3,
        ttft["p99"] / 1e3,
        note,
    )


# -- report ----------------------------------------------------------------------------------------


def markdown(rows: Sequence[Row], command: str, pods: int, skipped: str | None) -> str:
    out = [
        f"- command: `{command}`",
        f"- fleet: {pods} simulated `l4-llama3-8b` pods (max_num_seqs 64, max_lora 2, 6 adapters), one gateway;"
        " each run on a fresh fleet; TTFT in seconds, client-measured",
        "- both clients replay the same seeded trace at its own timestamps (guidellm: profile `replay`,"
        " schedule_turn=timestamp) with the same prompts and output lengths; the built-in client sends"
        " the long generations unstreamed, so its TTFT covers the streamed chats only; guidellm streams"
        " every request and its TTFT covers all of them",
    ]
    if skipped:
        out.append(f"- guidellm skipped: {skipped}")
    out.append("- inference-perf skipped: 0.7.0 requires Python >= 3.12 and this machine has 3.11 only")
    out += [
        "",
        "| scenario | client | policy | requests | errors | TTFT p50 | p90 | p99 | vs round-robin p90 / p99 | note |",
    ]
    out.append("|---|---|---|---|---|---|---|---|---|---|")
    base = {(r.scenario, r.client): r for r in rows if r.policy == "round-robin"}
    for r in rows:
        b = base.get((r.scenario, r.client))
        vs = ""
        if b is not None and r.policy != "round-robin" and b.ttft_p90 > 0 and b.ttft_p99 > 0:
            vs = f"{r.ttft_p90 / b.ttft_p90:.2f}x / {r.ttft_p99 / b.ttft_p99:.2f}x"
        out.append(
            f"| {r.scenario} | {r.client} | {r.policy} | {r.requests} | {r.errors} | {r.ttft_p50:.2f} "
            f"| {r.ttft_p90:.2f} | {r.ttft_p99:.2f} | {vs} | {r.note} |"
        )
    return "\n".join(out) + "\n"


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="fleetgate bench loadgen", description=__doc__.split("\n\n")[0])
    ap.add_argument("--install", action="store_true", help="install guidellm into .venv-loadgen (~4 GB)")
    ap.add_argument("--quick", action="store_true", help="4 pods, 30 s traces")
    ap.add_argument(
        "--scenarios", default="no-adapters,lora-scarce", help="comma-separated routing scenarios"
    )
    ap.add_argument("--clients", default="builtin,guidellm", help="load generators to run, comma-separated")
    ap.add_argument("--pods", type=int, help="simulated pods (default 8, 4 with --quick)")
    ap.add_argument("--duration", type=float, help="trace length in seconds (default 120, 30 with --quick)")
    ap.add_argument("--rps", type=float, help="mean request rate (default 3, 1.5 with --quick)")
    ap.add_argument("--seed", type=int, default=7, help="trace seed (default 7)")
    ap.add_argument("--out", default=str(RESULTS_DIR), help="directory for the result tables")
    args = ap.parse_args(argv)
    pods = args.pods or (4 if args.quick else 8)
    duration = args.duration or (30.0 if args.quick else 120.0)
    rps = args.rps or (1.5 if args.quick else 3.0)
    table = scenarios(duration, rps, args.seed)
    names = [s.strip() for s in args.scenarios.split(",") if s.strip()]
    unknown = [n for n in names if n not in table]
    if unknown:
        print(f"unknown scenarios: {unknown} (known: {', '.join(table)})", file=sys.stderr)
        return 2
    clients = {c.strip() for c in args.clients.split(",")}
    skipped = install() if args.install else unavailable()
    rows: list[Row] = []
    with tempfile.TemporaryDirectory(prefix="fleetgate-loadgen-") as tmp:
        tokenizer = (
            write_tokenizer(Path(tmp) / "tokenizer") if skipped is None and "guidellm" in clients else None
        )
        for name in names:
            sc = table[name]
            reqs = generate(sc.trace)
            for policy in POLICIES:
                for client in ("builtin", "guidellm"):
                    if client not in clients or (client == "guidellm" and tokenizer is None):
                        continue
                    work = Path(tmp) / f"{name}-{policy}-{client}"
                    work.mkdir()
                    print(f"  {name} {policy} {client} ...", file=sys.stderr, flush=True)
                    if client == "builtin":
                        row = run_builtin(sc, pods, policy, reqs, work)
                    else:
                        assert tokenizer is not None
                        row = run_guidellm(replace(sc), pods, policy, reqs, work, tokenizer)
                    rows.append(row)
                    print(
                        f"    TTFT p50 {row.ttft_p50:.2f} p90 {row.ttft_p90:.2f} p99 {row.ttft_p99:.2f} {row.note}",
                        file=sys.stderr,
                    )
    command = shlex.join(["fleetgate", "bench", "loadgen", *(sys.argv[1:] if argv is None else argv)])
    md = markdown(rows, command, pods, skipped)
    out_dir = Path(args.out)
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / ("loadgen_quick.md" if args.quick else "loadgen.md")).write_text(md)
    print(md)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
