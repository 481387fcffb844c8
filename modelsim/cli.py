"""`fleetgate sim`: serve N simulated pods (or a heterogeneous list from a YAML file)."""

from __future__ import annotations

import argparse
import asyncio
import logging
import signal
import sys

import msgspec

from common.config.loader import ConfigError, load_config
from common.listen_error import ListenError
from modelsim.faults import MODES, FaultError
from modelsim.fleet import PodSpec, SimFleet
from modelsim.kv_events import KVEventsConfig
from modelsim.profiles import PROFILES

log = logging.getLogger("modelsim")


class PodSpecEntry(msgspec.Struct, rename="camel", forbid_unknown_fields=True):
    """One pod in a --pod-spec file (camelCase, like every Fleetgate config file)."""

    profile: str = "h100-llama3-8b"
    model: str = "meta-llama/Llama-3.1-8B-Instruct"
    adapters: list[str] = []
    preload_adapters: list[str] = []
    max_lora: int = 4
    metrics_format: str = "vllm"
    seed: int | None = None
    time_scale: float | None = None
    kv_capacity_tokens: int | None = None
    max_num_seqs: int | None = None
    max_num_batched_tokens: int | None = None
    lora_load_s: float | None = None
    enable_prefix_caching: bool = True
    fault: str | None = None
    fault_params: dict[str, float] = {}
    kv_events_config: str | None = None  # vLLM's --kv-events-config JSON
    prefix_hash_seed: str | None = None
    replicas: int = 1


class PodSpecFile(msgspec.Struct, forbid_unknown_fields=True):
    pods: list[PodSpecEntry]


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--pods", type=int, default=1, help="number of identical pods (ignored with --pod-spec)")
    p.add_argument(
        "--base-port", type=int, default=8000, help="pod i listens on base-port + i (0: ephemeral)"
    )
    p.add_argument("--host", default="127.0.0.1", help="bind address of every pod (default 127.0.0.1)")
    p.add_argument(
        "--profile",
        default="h100-llama3-8b",
        choices=sorted(PROFILES),
        help="GPU + model timing profile of every pod (default h100-llama3-8b)",
    )
    p.add_argument(
        "--model", default="meta-llama/Llama-3.1-8B-Instruct", help="base model name the pods serve"
    )
    p.add_argument("--adapters", default="", help="comma-separated LoRA adapter names every pod knows")
    p.add_argument("--preload", default="", help="comma-separated adapters resident at start")
    p.add_argument("--max-lora", type=int, default=4, help="LoRA adapter slots per pod (default 4)")
    p.add_argument(
        "--metrics-format",
        default="vllm",
        choices=["vllm", "sglang", "tgi"],
        help="which engine's /metrics the pods export (default vllm)",
    )
    p.add_argument("--seed", type=int, default=0, help="pod i uses seed + i")
    p.add_argument("--time-scale", type=float, default=1.0, help=">1 slows every duration uniformly")
    p.add_argument(
        "--kv-capacity-tokens",
        type=int,
        default=None,
        help="KV cache size in tokens (default: the profile's)",
    )
    p.add_argument(
        "--max-num-seqs",
        type=int,
        default=None,
        help="max running sequences per pod (default: the profile's)",
    )
    p.add_argument(
        "--pod-spec", default=None, help="YAML file: {pods: [{profile, model, adapters, replicas,...}]}"
    )
    p.add_argument(
        "--fault",
        action="append",
        default=[],
        metavar="I:MODE[:k=v,...]",
        help=f"start pod I with a fault ({'|'.join(MODES)}), e.g. 0:error:rate=0.3,status=503; repeatable",
    )
    p.add_argument(
        "--kv-events-config",
        default=None,
        metavar="JSON",
        help='publish vLLM KV-cache events over ZMQ, vLLM\'s JSON: {"enable_kv_cache_events": true, '
        '"endpoint": "tcp://*:5557", "replay_endpoint": "tcp://*:5558", "topic": "kv"}; '
        "* binds --host, pod i adds i to both ports",
    )
    p.add_argument(
        "--prefix-hash-seed",
        default="0",
        help="seed of the sha256_cbor block hashes in KV events (vLLM: PYTHONHASHSEED of the engine)",
    )
    p.add_argument("--log-level", default="info", help="log level (default info)")


def _csv(s: str) -> list[str]:
    return [x.strip() for x in s.split(",") if x.strip()]


def _fault_params(flag: str, kvs: str) -> dict[str, float | int]:
    """`rate=0.5,status=503` -> {"rate": 0.5, "status": 503}."""
    out: dict[str, float | int] = {}
    for kv in _csv(kvs):
        k, eq, v = kv.partition("=")
        try:
            out[k] = int(v) if v.isdigit() else float(v)
        except ValueError:
            eq = ""
        if not eq:
            raise ConfigError(f"--fault {flag!r}: parameter {kv!r} is not k=<number>")
    return out


def _kv_events(text: str | None) -> KVEventsConfig | None:
    if not text:
        return None
    try:
        return KVEventsConfig.parse(text)
    except ValueError as e:
        raise ConfigError(str(e)) from None


def build_specs(args: argparse.Namespace) -> list[PodSpec]:
    if args.pod_spec:
        spec_file = load_config(args.pod_spec, PodSpecFile)
        specs: list[PodSpec] = []
        for i, e in enumerate(spec_file.pods):
            if e.replicas < 1:
                raise ConfigError(f"{args.pod_spec}: field `pods[{i}].replicas`: must be >= 1")
            for _ in range(e.replicas):
                specs.append(
                    PodSpec(
                        profile=e.profile,
                        model=e.model,
                        adapters=list(e.adapters),
                        preload_adapters=list(e.preload_adapters),
                        max_lora=e.max_lora,
                        metrics_format=e.metrics_format,  # type: ignore[arg-type]
                        seed=e.seed if e.seed is not None else args.seed + len(specs),
                        time_scale=e.time_scale if e.time_scale is not None else args.time_scale,
                        kv_capacity_tokens=e.kv_capacity_tokens,
                        max_num_seqs=e.max_num_seqs,
                        max_num_batched_tokens=e.max_num_batched_tokens,
                        lora_load_s=e.lora_load_s,
                        enable_prefix_caching=e.enable_prefix_caching,
                        fault=e.fault,
                        fault_params=dict(e.fault_params),
                        kv_events=_kv_events(e.kv_events_config or args.kv_events_config),
                        prefix_hash_seed=e.prefix_hash_seed or args.prefix_hash_seed,
                    )
                )
    else:
        if args.pods < 1:
            raise ConfigError("--pods: must be >= 1")
        adapters = _csv(args.adapters)
        preload = _csv(args.preload)
        kv_events = _kv_events(args.kv_events_config)
        specs = [
            PodSpec(
                profile=args.profile,
                model=args.model,
                adapters=adapters + [a for a in preload if a not in adapters],
                preload_adapters=preload,
                max_lora=args.max_lora,
                metrics_format=args.metrics_format,
                seed=args.seed + i,
                time_scale=args.time_scale,
                kv_capacity_tokens=args.kv_capacity_tokens,
                max_num_seqs=args.max_num_seqs,
                kv_events=kv_events,
                prefix_hash_seed=args.prefix_hash_seed,
            )
            for i in range(args.pods)
        ]
    for f in args.fault:
        idx, _, rest = f.partition(":")
        mode, _, kvs = rest.partition(":")
        if not idx.isdigit() or int(idx) >= len(specs) or not mode:
            raise ConfigError(f"--fault {f!r}: expected I:MODE[:k=v,...] with 0 <= I < {len(specs)}")
        specs[int(idx)].fault = mode
        specs[int(idx)].fault_params = _fault_params(f, kvs)
    for i, s in enumerate(specs):
        try:
            s.validate()
        except (ValueError, FaultError) as exc:
            raise ConfigError(f"pod {i}: {exc}") from None
    return specs


async def _serve(fleet: SimFleet) -> None:
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    await fleet.start()
    for pod in fleet.pods:
        s = pod.spec
        adapters = f" adapters={','.join(s.adapters)}" if s.adapters else ""
        fault = f" fault={s.fault}" if s.fault else ""
        if pod.kv_events is not None:
            replay = f" replay={pod.kv_events.replay_endpoint}" if pod.kv_events.replay_endpoint else ""
            fault += f" kv-events={pod.kv_events.endpoint}{replay}"
        print(
            f"modelsim pod {pod.index} listening on {pod.url} "
            f"(profile={s.profile} model={s.model} metrics={s.metrics_format}{adapters}{fault})",
            flush=True,
        )
    await stop.wait()
    await fleet.stop()


def run(args: argparse.Namespace) -> int:
    logging.basicConfig(level=args.log_level.upper(), format="%(asctime)s %(levelname)s %(name)s %(message)s")
    try:
        specs = build_specs(args)
        fleet = SimFleet(specs, host=args.host, base_port=args.base_port)
    except (ConfigError, ValueError) as exc:
        print(f"fleetgate sim: {exc}", file=sys.stderr)
        return 2
    try:
        asyncio.run(_serve(fleet))
    except OSError as exc:
        reason = exc if isinstance(exc, ListenError) else f"cannot listen: {exc}"
        print(f"fleetgate sim: {reason}", file=sys.stderr)
        return 1
    return 0
