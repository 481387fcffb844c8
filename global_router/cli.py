"""`fleetgate global-router`: run the global router until SIGTERM/SIGINT, or hash an API key."""

from __future__ import annotations

import argparse
import asyncio
import logging
import signal
import sys

import msgspec

from common import runloop
from common.config.loader import ConfigError, load_config
from common.config.router import GlobalRouterConfig
from common.listen_error import ListenError
from common.worker_processes import resolve_count, workers_arg
from global_router.tenants import hash_key

log = logging.getLogger("fleetgate.router")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--config", metavar="FILE", help="router config YAML (GlobalRouterConfig)")
    parser.add_argument("--port", type=int, help="HTTP port (overrides `port`; 0 = any free port)")
    parser.add_argument(
        "--grpc-port", type=int, help="capacity gRPC port (overrides `capacity.port`; 0 = any)"
    )
    parser.add_argument(
        "--host", help="bind address for HTTP and gRPC (overrides `host` and `capacity.host`)"
    )
    parser.add_argument(
        "--hash-key",
        metavar="KEY",
        help="print the SHA-256 form of an API key for `tenants[].apiKeySha256` (or `adminKeySha256`) and exit; "
        "pass - to read the key from stdin (keeps it out of shell history)",
    )
    parser.add_argument(
        "--workers",
        default="auto",
        type=workers_arg,
        help="serving processes on the HTTP port (SO_REUSEPORT); 'auto' = one per usable CPU (affinity mask, cgroup quota) with `redis` "
        "configured, else 1 (workers share the fleet view and limits through Redis)",
    )
    parser.add_argument("--log-level", default="INFO", help="log level (default INFO)")
    parser.add_argument(
        "--log-format", choices=["json", "text"], default="json", help="log line format (default json)"
    )


def build_config(args: argparse.Namespace) -> GlobalRouterConfig:
    if not args.config:
        raise ConfigError("--config FILE is required (or --hash-key KEY)")
    cfg = load_config(args.config, GlobalRouterConfig)
    for name, value in (("--port", args.port), ("--grpc-port", args.grpc_port)):
        if value is not None and not 0 <= value <= 65535:
            raise ConfigError(f"{name}: {value} is not a TCP port (0-65535)")
    if args.host:
        cfg = msgspec.structs.replace(
            cfg, host=args.host, capacity=msgspec.structs.replace(cfg.capacity, host=args.host)
        )
    return cfg


def _workers(cfg: GlobalRouterConfig, args: argparse.Namespace) -> int:
    if args.workers in (None, "auto") and cfg.redis is None:
        return 1  # the fleet view and the limits are this process's own
    return resolve_count(args.workers)


async def _serve(cfg: GlobalRouterConfig, args: argparse.Namespace) -> int:
    from global_router.router import GlobalRouter

    try:
        router = GlobalRouter(cfg, http_port=args.port, grpc_port=args.grpc_port, workers=_workers(cfg, args))
    except ConfigError as exc:
        print(f"fleetgate global-router: {exc}", file=sys.stderr)
        return 2
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    try:
        await router.start()
    except ValueError as exc:  # e.g. capacity.tlsCertFile unreadable: the config is unusable
        print(f"fleetgate global-router: {exc}", file=sys.stderr)
        return 2
    except OSError as exc:
        reason = exc if isinstance(exc, ListenError) else f"cannot listen: {exc}"
        print(f"fleetgate global-router: {reason}", file=sys.stderr)
        return 1
    try:
        await stop.wait()
        log.info("draining: leaving rotation, then finishing the requests in flight")
        await router.drain()
    finally:
        await router.stop()
    return 0


def _setup_logging(args: argparse.Namespace) -> None:
    try:
        from common.telemetry import setup_logging, setup_tracing
    except ImportError:  # telemetry helpers not installed in this build: plain logging
        logging.basicConfig(
            level=args.log_level.upper(), format="%(asctime)s %(levelname)s %(name)s %(message)s"
        )
        return
    setup_logging("global-router", level=args.log_level.upper(), json=args.log_format == "json")
    setup_tracing("global-router")


def run(args: argparse.Namespace) -> int:
    if args.hash_key is not None:
        key = sys.stdin.readline().rstrip("\n") if args.hash_key == "-" else args.hash_key
        if not key:
            print("fleetgate global-router: --hash-key: the key is empty", file=sys.stderr)
            return 2
        print(hash_key(key))
        return 0
    try:
        cfg = build_config(args)
    except ConfigError as exc:
        print(f"fleetgate global-router: {exc}", file=sys.stderr)
        return 2
    try:
        _setup_logging(args)
    except ValueError as exc:  # e.g. OTEL_TRACES_EXPORTER=otlp without the exporter installed
        print(f"fleetgate global-router: {exc}", file=sys.stderr)
        return 2
    logging.getLogger("httpx").setLevel(logging.WARNING)
    return runloop.run(_serve(cfg, args))
