"""`fleetgate gateway`: run one cluster gateway until SIGTERM/SIGINT."""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import signal
import sys
from typing import TYPE_CHECKING

from common import runloop
from common.config.gateway import GatewaySpec
from common.config.loader import ConfigError, load_config, load_config_data
from common.listen_error import ListenError
from common.worker_processes import resolve_count, workers_arg

if TYPE_CHECKING:
    from cluster_gateway.gateway import ClusterGateway

log = logging.getLogger("fleetgate.gateway")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--config", metavar="FILE", help="gateway config YAML (the FleetgateGateway spec)")
    parser.add_argument("--port", type=int, help="HTTP port for the proxy (overrides `port`; 0 = any)")
    parser.add_argument(
        "--pods",
        metavar="URL,URL",
        help="a static pool of model-server URLs (instead of, or overriding, the config's discovery)",
    )
    parser.add_argument(
        "--extproc-port",
        type=int,
        help="enable the Envoy ext_proc endpoint picker on this port (overrides `extProc.port`)",
    )
    parser.add_argument(
        "--extauthz",
        action="store_true",
        help="also serve Envoy's ext_authz HTTP check (the faster picker, docs/envoy-picker.md) on the "
        "HTTP port; its access-log service shares the ext_proc port",
    )
    parser.add_argument("--host", help="bind address (overrides `host`)")
    parser.add_argument(
        "--workers",
        default="auto",
        type=workers_arg,
        help="serving processes sharing the ports (default auto: one per CPU this process may use: its affinity mask and cgroup quota); discovery, scraping "
        "and the capacity agent run once, in the first",
    )
    parser.add_argument(
        "--crd",
        metavar="NAMESPACE/NAME",
        help="read the config from this FleetgateGateway resource and report its status",
    )
    parser.add_argument(
        "--status-resource",
        metavar="NAMESPACE/NAME",
        default=os.environ.get("FLEETGATE_GATEWAY_RESOURCE"),
        help="with --config: report status to this FleetgateGateway (default: $FLEETGATE_GATEWAY_RESOURCE)",
    )
    parser.add_argument(
        "--kubeconfig", help="kubeconfig file for --crd/--status-resource (default: in-cluster)"
    )
    parser.add_argument("--log-level", default="INFO", help="log level (default INFO)")
    parser.add_argument(
        "--log-format", choices=["json", "text"], default="json", help="log line format (default json)"
    )


def build_spec(args: argparse.Namespace) -> GatewaySpec:
    """Config file (or an empty spec) with the command-line overrides applied, validated as one."""
    from cluster_gateway.discovery import static_from_urls

    if args.config is None and not args.pods and getattr(args, "crd_spec", None) is None:
        raise ConfigError("one of --config FILE, --crd NAMESPACE/NAME or --pods URL,URL is required")
    spec = load_config(args.config, GatewaySpec) if args.config else getattr(args, "crd_spec", None)
    if args.pods:
        urls = [u.strip() for u in args.pods.split(",") if u.strip()]
        if not urls:
            raise ConfigError("--pods: give at least one URL")
        discovery = static_from_urls(urls)
        if spec is None:
            spec = load_config_data(
                {"discovery": {"static": {"endpoints": urls}}}, GatewaySpec, source="--pods"
            )
        spec.discovery = discovery
    assert spec is not None
    if args.host:
        spec.host = args.host
    if args.extproc_port is not None:
        spec.ext_proc.enabled = True
        spec.ext_proc.port = args.extproc_port
    if getattr(args, "extauthz", False):
        spec.ext_authz.enabled = True
    for name, value in (("--port", args.port), ("--extproc-port", args.extproc_port)):
        if value is not None and not 0 <= value <= 65535:
            raise ConfigError(f"{name}: {value} is not a TCP port (0-65535)")
    return spec


def _workers(args: argparse.Namespace) -> int:
    return resolve_count(args.workers)


async def _serve(spec: GatewaySpec, args: argparse.Namespace) -> int:
    from cluster_gateway.gateway import ClusterGateway

    try:
        gateway = ClusterGateway(spec, port=args.port, extproc_port=args.extproc_port, workers=_workers(args))
    except ConfigError as exc:  # e.g. a profile naming an unknown scorer
        print(f"fleetgate gateway: {exc}", file=sys.stderr)
        return 2
    _attach_status(gateway, spec, args)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    try:
        await gateway.start()
    except OSError as exc:
        reason = exc if isinstance(exc, ListenError) else f"cannot listen: {exc}"
        print(f"fleetgate gateway: {reason}", file=sys.stderr)
        return 1
    try:
        await stop.wait()
        log.info("draining: leaving rotation, then finishing the requests in flight")
        await gateway.drain()
    finally:
        await gateway.stop()
    return 0


def _attach_status(gateway: ClusterGateway, spec: GatewaySpec, args: argparse.Namespace) -> None:
    """Publish the pool's health as the FleetgateGateway's status conditions, when there is one."""
    ref = args.crd or args.status_resource
    if not ref:
        return
    from cluster_gateway.k8s.client import load_api_client
    from cluster_gateway.k8s.crd_source import parse_resource_ref
    from cluster_gateway.k8s.status import StatusReporter
    from cluster_gateway.k8s.status_loop import publish_status

    try:
        namespace, name = parse_resource_ref(ref)
        api = getattr(args, "crd_api", None) or load_api_client(args.kubeconfig, field="--kubeconfig")
    except ConfigError as exc:  # status is a courtesy: never stop routing for it
        log.warning("not reporting FleetgateGateway status: %s", exc)
        return
    reporter = StatusReporter(api, namespace, name, generation=getattr(args, "crd_generation", 0))
    agent = gateway.agent

    async def run_status() -> None:
        await publish_status(
            reporter,
            gateway.pool,
            max_staleness_s=spec.scrape.max_staleness_ms / 1000,
            router_connected=(lambda: agent.connected) if agent is not None else (lambda: None),
        )

    gateway.add_background("crd-status", run_status)


def _load_from_cluster(args: argparse.Namespace) -> None:
    from cluster_gateway.k8s.status_loop import load_gateway_from_cluster

    resource, api = asyncio.run(load_gateway_from_cluster(args.crd, args.kubeconfig))
    args.crd_spec, args.crd_api, args.crd_generation = resource.spec, api, resource.generation


def _setup_logging(args: argparse.Namespace) -> None:
    from common.telemetry import setup_logging, setup_tracing

    setup_logging("cluster-gateway", level=args.log_level.upper(), json=args.log_format == "json")
    setup_tracing("cluster-gateway")


def run(args: argparse.Namespace) -> int:
    try:
        if args.crd and args.config:
            raise ConfigError("--crd and --config are alternatives: give one")
        if args.crd:
            _load_from_cluster(args)
        spec = build_spec(args)
    except ConfigError as exc:
        print(f"fleetgate gateway: {exc}", file=sys.stderr)
        return 2
    try:
        _setup_logging(args)
    except ValueError as exc:  # e.g. an unknown --log-level or traces exporter
        print(f"fleetgate gateway: {exc}", file=sys.stderr)
        return 2
    return runloop.run(_serve(spec, args))
