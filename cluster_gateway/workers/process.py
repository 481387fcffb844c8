"""Gateway worker processes: a data plane each over a pool replica, sharing the gateway's ports.

`fleetgate gateway --workers N` keeps one control plane (discovery, one scrape of each pod, the
capacity agent) in the gateway process, which also serves requests, and starts N-1 worker
processes that serve on the same HTTP (and ext_proc) port through SO_REUSEPORT, so the kernel
spreads connections over every core. Workers learn the pool from the feed (`feed.py`) and never
scrape. A worker that dies is restarted after a second; a worker whose feed closes (the gateway
process went away) stops.

    python -m cluster_gateway.workers.process --spec FILE --feed PATH --worker K --port P [--extproc-port Q]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import os
import signal
import sys
import tempfile
from pathlib import Path

import msgspec

from cluster_gateway.data_plane import DataPlane
from cluster_gateway.observability import GatewayMetrics
from cluster_gateway.pool import EndpointPool
from cluster_gateway.workers.replica import PoolReplica
from common.asgi import listen_socket
from common.config.gateway import GatewaySpec
from common.worker_processes import WorkerProcesses, die_with_parent

log = logging.getLogger("fleetgate.gateway.workers")

SYNC_TIMEOUT_S = 30.0


class WorkerSupervisor(WorkerProcesses):
    """The gateway's worker processes: each gets the spec (a private temp file) and the feed."""

    def __init__(self, spec: GatewaySpec, count: int, feed: str, port: int, extproc_port: int | None) -> None:
        self._dir = tempfile.TemporaryDirectory(prefix="fleetgate-workers-")
        self._spec_file = Path(self._dir.name) / "spec.json"
        if extproc_port is not None:  # the bound port: `--extproc-port 0` leaves 0 in the spec,
            # which the spec's own validation refuses (a worker that cannot start, restarted forever)
            spec = msgspec.structs.replace(
                spec, ext_proc=msgspec.structs.replace(spec.ext_proc, port=extproc_port)
            )
        self._spec_file.write_bytes(msgspec.json.encode(spec))
        self.feed, self.port, self.extproc_port = feed, port, extproc_port
        super().__init__("gateway", count, self._command)

    def _command(self, worker: int) -> list[str]:
        cmd = [
            sys.executable,
            "-m",
            "cluster_gateway.workers.process",
            "--spec",
            str(self._spec_file),
            "--feed",
            self.feed,
            "--worker",
            str(worker),
            "--port",
            str(self.port),
            "--log-level",
            logging.getLevelName(logging.getLogger().getEffectiveLevel()),
        ]
        if self.extproc_port is not None:
            cmd += ["--extproc-port", str(self.extproc_port)]
        return cmd

    async def stop(self, grace_s: float = 8.0) -> None:
        await super().stop(grace_s)
        self._dir.cleanup()


async def _serve(spec: GatewaySpec, args: argparse.Namespace) -> int:
    pool = EndpointPool()
    metrics = GatewayMetrics()
    plane = DataPlane(spec, pool, metrics, worker=args.worker)
    metrics.watch_pool(pool, lambda: len(plane.admission))
    releases = plane.releases
    replica = PoolReplica(
        pool,
        args.feed,
        args.worker,
        plane.admission.depth_by_model,
        metrics.shipped_samples,
        releases=(releases.drain, releases.route) if releases is not None else None,
    )
    metrics.remote_render = replica.group_metrics  # /metrics here: the whole group's (metrics_feed.py)
    feed = asyncio.create_task(replica.run())
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    loop.add_signal_handler(signal.SIGUSR1, plane.begin_drain)  # the gateway process drains
    synced = asyncio.create_task(replica.synced.wait())
    await asyncio.wait({feed, synced}, timeout=SYNC_TIMEOUT_S, return_when=asyncio.FIRST_COMPLETED)
    if not replica.synced.is_set():
        synced.cancel()
        feed.cancel()
        log.error("gateway worker %d: no pool feed from the gateway process", args.worker)
        return 1
    await plane.start(
        listen_socket(spec.host, args.port, reuse_port=True), args.extproc_port, reuse_port=True
    )
    log.info("gateway worker %d (pid %d) serving on port %d", args.worker, os.getpid(), args.port)

    async def recheck() -> None:  # a snapshot may have freed a pod for queued requests
        while True:
            await asyncio.sleep(spec.scrape.interval_ms / 1000.0)
            plane.admission.notify()

    rechecker = asyncio.create_task(recheck())
    stopped = asyncio.create_task(stop.wait())
    await asyncio.wait({feed, stopped}, return_when=asyncio.FIRST_COMPLETED)
    rechecker.cancel()
    plane.begin_drain()  # the gateway process gave notice already: stop accepting, finish in flight
    await plane.stop(drain=True)
    feed.cancel()
    with contextlib.suppress(BaseException):
        await feed
    return 0


def main(argv: list[str] | None = None) -> int:
    from common import runloop
    from common.telemetry import setup_logging, setup_tracing

    ap = argparse.ArgumentParser(
        prog="python -m cluster_gateway.workers.process", description=__doc__.split("\n")[0]
    )
    ap.add_argument("--spec", required=True, help="the gateway spec as JSON (written by the gateway process)")
    ap.add_argument("--feed", required=True, help="Unix socket of the gateway process's pool feed")
    ap.add_argument("--worker", type=int, required=True, help="this worker's index (1..N-1)")
    ap.add_argument("--port", type=int, required=True, help="the gateway's HTTP port (shared)")
    ap.add_argument("--extproc-port", type=int, default=None, help="the gateway's ext_proc port (shared)")
    ap.add_argument("--log-level", default="INFO", help="log level")
    args = ap.parse_args(argv)
    die_with_parent()  # an orphan must not keep serving the shared port
    setup_logging("cluster-gateway", level=args.log_level)
    setup_tracing("cluster-gateway")
    spec = msgspec.json.decode(Path(args.spec).read_bytes(), type=GatewaySpec)
    return runloop.run(_serve(spec, args))


if __name__ == "__main__":
    raise SystemExit(main())
