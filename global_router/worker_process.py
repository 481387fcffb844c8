"""Global router worker processes: more data-plane cores over one shared fleet view.

`fleetgate global-router --workers N` (with `redis` configured) keeps the capacity server, the one
control-plane piece, in the main process and starts N-1 workers on the same HTTP port through
SO_REUSEPORT. A worker is a router replica without a capacity server: it learns the fleet, the
drains and the rate limits from Redis exactly like another replica would (pub/sub plus rescans,
`fleet_view.py`), so what a replica sees is what a worker sees. Without Redis the fleet view and
the limits live in one process, so the router refuses more than one worker there.

    python -m global_router.worker_process --config FILE --worker K --port P

(`workers.py` is the main process's side: it writes the config and starts these.)
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import signal
from pathlib import Path

import msgspec

from common.config.router import GlobalRouterConfig
from common.worker_processes import die_with_parent
from global_router.router import GlobalRouter

log = logging.getLogger("fleetgate.router.workers")


async def _serve(cfg: GlobalRouterConfig, args: argparse.Namespace) -> int:
    router = GlobalRouter(cfg, http_port=args.port, capacity_server=False, reuse_port=True)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    # the main process gave notice (docs/drain.md): /ready says 503 while this worker serves on
    loop.add_signal_handler(signal.SIGUSR1, lambda: setattr(router.readiness, "draining", True))
    await router.start()
    log.info("router worker %d (pid %d) serving on port %d", args.worker, os.getpid(), router.http_port)
    try:
        await stop.wait()
    finally:
        await router.stop(drain=True)  # stop accepting, finish what is in flight
    return 0


def main(argv: list[str] | None = None) -> int:
    from common import runloop
    from common.telemetry import setup_logging, setup_tracing

    ap = argparse.ArgumentParser(
        prog="python -m global_router.worker_process", description=__doc__.split("\n")[0]
    )
    ap.add_argument("--config", required=True, help="the router config as JSON (written by the main process)")
    ap.add_argument("--worker", type=int, required=True, help="this worker's index (1..N-1)")
    ap.add_argument("--port", type=int, required=True, help="the router's HTTP port (shared)")
    ap.add_argument("--log-level", default="INFO", help="log level")
    args = ap.parse_args(argv)
    die_with_parent()  # an orphan must not keep serving the shared port
    setup_logging("global-router", level=args.log_level)
    setup_tracing("global-router")
    cfg = msgspec.json.decode(Path(args.config).read_bytes(), type=GlobalRouterConfig)
    return runloop.run(_serve(cfg, args))


if __name__ == "__main__":
    raise SystemExit(main())
