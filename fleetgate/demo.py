"""`fleetgate demo`: a whole local fleet in one command, on embedded defaults.

Three clusters (`demo_fleet.DEFAULT_FLEET`), each a `fleetgate sim` child process of heterogeneous
simulated pods plus an in-process cluster gateway whose agent streams capacity to one in-process
global router. The first output line is `global endpoint: http://127.0.0.1:PORT`, then the demo API
key, ready-to-paste examples and a live view. Ctrl-C / SIGTERM (or `--duration`) stops everything it
started and exits 0; a child that dies on its own is named and the demo exits 1.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import errno
import importlib.util
import logging
import shlex
import signal
import sys
import tempfile
from collections import deque
from collections.abc import Coroutine
from pathlib import Path
from typing import Any, TextIO

from cluster_gateway.gateway import ClusterGateway
from common import runloop
from common.config.loader import ConfigError
from fleetgate.demo_fleet import (
    BASE_MODEL,
    DEFAULT_FLEET,
    ClusterPlan,
    DemoSecrets,
    adapters_of,
    gateway_secret_path,
    gateway_spec,
    pod_spec_document,
    router_config,
    token_path,
)
from fleetgate.demo_load import LoadGenerator
from fleetgate.demo_procs import ChildError, SimProcess
from fleetgate.demo_view import Clock, FleetFrame, FleetProbe, LiveTerminal, render_summary, render_table
from global_router.router import GlobalRouter

log = logging.getLogger("fleetgate.demo")
PREFERRED_PORT = 8000


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--port",
        type=int,
        default=None,
        help=f"port of the global endpoint (default {PREFERRED_PORT} if free, else any free port; 0 = any)",
    )
    p.add_argument("--time-scale", type=float, default=1.0, help="passed to the simulators: >1 slows them")
    p.add_argument("--duration", type=float, default=None, metavar="S", help="stop by itself S s after start")
    p.add_argument("--no-live", action="store_true", help="print only the header, no live view")
    p.add_argument("--load", action="store_true", help="drive a small built-in traffic mix")
    p.add_argument("--load-rps", type=float, default=3.0, help="request rate of --load (default 3/s)")
    p.add_argument("--redis", metavar="URL", default=None, help="share the router's state in Redis")
    p.add_argument("--interval", type=float, default=1.0, help="live view refresh period in seconds")
    p.add_argument(
        "--summary-every", type=float, default=5.0, help="seconds between summary lines when not on a TTY"
    )
    p.add_argument(
        "--ready-timeout", type=float, default=90.0, help="seconds to wait for every cluster to report"
    )
    p.add_argument("--log-level", default="WARNING", help="log level of the components (default WARNING)")
    p.add_argument(
        "--access-log",
        metavar="FILE",
        default=None,
        help="where both tiers write one JSON line per request (default: access.log in the demo's "
        "temporary directory, printed in the header)",
    )
    p.add_argument(
        "--netns",
        action="store_true",
        help="run each region in its own network namespace, 20-150 ms apart (needs root; docs/testbed.md)",
    )


def validate(args: argparse.Namespace) -> None:
    if args.port is not None and not 0 <= args.port <= 65535:
        raise ConfigError(f"--port: {args.port} is not a TCP port (0-65535)")
    for name in ("time_scale", "interval", "summary_every", "ready_timeout", "load_rps"):
        if not getattr(args, name) > 0:
            raise ConfigError(f"--{name.replace('_', '-')}: must be > 0")
    if args.duration is not None and not args.duration > 0:
        raise ConfigError("--duration: must be > 0")
    if args.redis is not None and not args.redis.startswith(("redis://", "rediss://", "unix://")):
        raise ConfigError("--redis: expected a URL like redis://127.0.0.1:6379/0")
    if not isinstance(logging.getLevelName(args.log_level.upper()), int):
        raise ConfigError(f"--log-level: unknown level {args.log_level!r}")


class _RecentEvents(logging.Handler):
    """Keeps the last warnings for the live view, which would otherwise overwrite them."""

    def __init__(self, keep: int = 5) -> None:
        super().__init__()
        self.lines: deque[str] = deque(maxlen=keep)
        self.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s", "%H:%M:%S"))

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(self.format(record).replace("\n", " ")[:300])


def header(
    endpoint: str,
    keys: DemoSecrets,
    fleet: tuple[ClusterPlan, ...],
    gateways: dict[str, str],
    access_log: Path | None = None,
) -> list[str]:
    """What a newcomer needs: the endpoint (line 1), the key (line 2), the fleet, things to try."""
    n_pods = sum(len(c.pods) for c in fleet)
    first = fleet[0].cluster_id
    lines = [
        f"global endpoint: {endpoint}",
        f"api key: {keys.api_key}",
        f'batch api key: {keys.batch_key}   (tenant "batch": sent to the capacity with room that is cheapest per token)',
        f"admin key: {keys.admin_key}   (POST /admin/clusters/ID/drain, GET /fleet and the status page)",
        *(
            [
                f"access log: {access_log}   (one JSON line per request from the router and each gateway; request_id = x-request-id)"
            ]
            if access_log is not None
            else []
        ),
        "",
        f"fleet: {len(fleet)} clusters, {n_pods} simulated pods of {BASE_MODEL}; "
        f"LoRA adapters {', '.join(adapters_of(fleet))}",
    ]
    for c in fleet:
        engines = sorted({p.engine for p in c.pods})
        lines.append(
            f"  {c.cluster_id:<11} {c.region:<9} {c.capacity_type:<9} {f'{c.gpu} x{len(c.pods)}':<8} "
            f"${c.cost_per_gpu_hour:.2f}/GPU-h  {'/'.join(engines):<12} gateway {gateways[c.cluster_id]}"
        )
    lines += ["", *examples(endpoint, keys, gateways[first])]
    return lines


EXAMPLES_START = "# Try these in another shell; the block pastes and runs as printed:"
EXAMPLES_END = "# (end of examples)"


def examples(endpoint: str, keys: DemoSecrets, gateway: str) -> list[str]:
    """Commands to paste, flush left (a heredoc's `EOF` must start its line) with the real keys in.

    `tests/fleetgate/test_demo_examples_paste.py` runs this block, as printed, in a shell.
    """
    body = f'{{"model": "{BASE_MODEL}", "messages": [{{"role": "user", "content": "Hello!"}}], "max_tokens": 32}}'
    lines = [
        EXAMPLES_START,
        "",
        f"curl -si {endpoint}/v1/chat/completions \\",
        f'  -H "authorization: Bearer {keys.api_key}" -H "content-type: application/json" \\',
        f"  -d '{body}'; echo",
        "# the x-fleetgate-cluster response header names the cluster that served it;",
        '# add -H "x-fleetgate-client-region: ap-south" to be served nearby',
        "",
    ]
    if importlib.util.find_spec("openai") is not None:  # `make demo` installs it (the `demo` extra)
        lines += [
            f"{shlex.quote(sys.executable)} - <<'EOF'",
            "from openai import OpenAI",
            f'client = OpenAI(base_url="{endpoint}/v1", api_key="{keys.api_key}")',
            'reply = client.chat.completions.create(model="sql-lora", max_tokens=48,',
            '    messages=[{"role": "user", "content": "Top 5 customers by revenue"}])',
            'print("reply:", reply.choices[0].message.content)',
            "EOF",
            "",
        ]
    lines += [
        f'ADMIN_KEY="{keys.admin_key}"',
        f'curl -s {endpoint}/fleet -H "authorization: Bearer $ADMIN_KEY"; echo   # the fleet view (JSON)',
        f"# status page: {endpoint}/  (public view; with the admin key it also shows gateway URLs)",
        "",
        "# straight to a cluster gateway, bypassing the router: refused with 401 (gateways serve only",
        "# requests the router signed with the cluster's secret; docs/security.md)",
        f"curl -si {gateway}/v1/chat/completions -H \"content-type: application/json\" -d '{body}'; echo",
        "",
        "# drain a cluster at the router and watch traffic move; -d '{\"drain\": false}' undoes it",
        f'curl -s -X POST {endpoint}/admin/clusters/us-east-1/drain -H "authorization: Bearer $ADMIN_KEY"; echo',
        EXAMPLES_END,
        "",
    ]
    return lines


class Demo:
    def __init__(self, args: argparse.Namespace, out: TextIO, events: _RecentEvents | None) -> None:
        self.args = args
        self.out = out
        self.events = events
        self.fleet = DEFAULT_FLEET
        self.keys = DemoSecrets.generate([c.cluster_id for c in self.fleet])
        self.stop = asyncio.Event()
        self.failure: str | None = None
        self._stopping = False
        self.sims: dict[str, SimProcess] = {}
        self.router: GlobalRouter | None = None
        self.gateways: dict[str, ClusterGateway] = {}
        self._watchers: list[asyncio.Task[None]] = []
        self.load: LoadGenerator | None = None
        self.workdir = Path(".")  # set by start()
        self.access_log: Path | None = None  # set by start()

    def fail(self, message: str) -> None:
        if self.failure is None and not self._stopping:
            self.failure = message
        self.stop.set()

    # --- start -----------------------------------------------------------------------------------
    async def _watch(self, sim: SimProcess) -> None:
        code = await sim.wait_exit()
        if not self._stopping:
            tail = sim.log_tail()
            self.fail(
                f"{sim.describe()} {sim.exit_reason(code)}"
                + (f"; its last log lines:\n{tail}" if tail else "")
            )

    async def _start_router(self) -> GlobalRouter:
        cfg = router_config(self.fleet, self.keys, secret_dir=self.workdir, redis_url=self.args.redis)
        ports = [self.args.port] if self.args.port is not None else [PREFERRED_PORT, 0]
        for i, port in enumerate(ports):
            router = GlobalRouter(cfg, http_port=port, grpc_port=0)
            try:
                await router.start()
                return router
            except OSError as exc:
                if exc.errno != errno.EADDRINUSE or i == len(ports) - 1:
                    raise ConfigError(
                        f"--port {port}: the global endpoint cannot listen there: {exc.strerror}"
                    ) from None
        raise AssertionError("unreachable")

    async def start(self, workdir: Path) -> None:
        for i, plan in enumerate(self.fleet):
            doc = pod_spec_document(plan, time_scale=self.args.time_scale, seed=100 * i)
            self.sims[plan.cluster_id] = SimProcess(
                plan.cluster_id, doc, workdir, time_scale=self.args.time_scale
            )
        # Children first: no server threads exist yet when they fork.
        for sim in self.sims.values():
            await sim.start()
            self._watchers.append(asyncio.create_task(self._watch(sim), name=f"watch-{sim.name}"))
        await asyncio.gather(*(sim.wait_ready(self.args.ready_timeout) for sim in self.sims.values()))
        self.workdir = workdir
        self.access_log = open_access_log(
            Path(self.args.access_log) if self.args.access_log else workdir / "access.log"
        )
        self.keys.write_files(workdir)  # agent tokens and router->gateway secrets, mode 0600
        self.router = await self._start_router()
        address = f"127.0.0.1:{self.router.grpc_port}"
        for plan in self.fleet:
            spec = gateway_spec(
                plan,
                self.sims[plan.cluster_id].urls,
                router_capacity_address=address,
                token_file=token_path(workdir, plan.cluster_id),
                gateway_secret_file=gateway_secret_path(workdir, plan.cluster_id),
                time_scale=self.args.time_scale,
            )
            gateway = ClusterGateway(spec, port=0)
            self.gateways[plan.cluster_id] = gateway
            await gateway.start()
        await self._wait_fleet_ready()

    def _ready_counts(self) -> dict[str, int]:
        """Ready pods per cluster with a fresh report listing its adapters, as the router sees them.

        A pod's adapters reach the report once the gateway has read its `/v1/models`, a moment after
        its metrics: until then an adapter example pasted from the header would get a 404.
        """
        assert self.router is not None
        want = {c.cluster_id: {a for p in c.pods for a in p.adapters} for c in self.fleet}
        out: dict[str, int] = {}
        for c in self.router.fleet.snapshot():
            m = c.models.get(BASE_MODEL)
            if self.router.selector.is_fresh(c) and m is not None:
                out[c.cluster_id] = m.ready_pods if want.get(c.cluster_id, set()) <= m.adapters else 0
        return out

    async def _wait_fleet_ready(self) -> None:
        """Every cluster reported with all its pods ready (or, at the deadline, at least one)."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.args.ready_timeout
        while True:
            ready = self._ready_counts()
            if all(ready.get(c.cluster_id, 0) >= len(c.pods) for c in self.fleet):
                return
            if loop.time() > deadline:
                missing = [c.cluster_id for c in self.fleet if ready.get(c.cluster_id, 0) < 1]
                if missing:
                    raise ChildError(
                        f"no fresh capacity report with ready pods from {', '.join(missing)} "
                        f"after {self.args.ready_timeout:.0f} s"
                    )
                log.warning("starting with some pods not ready yet: %s", ready)
                return
            await asyncio.sleep(0.1)

    # --- run -------------------------------------------------------------------------------------
    def _print(self, lines: list[str]) -> None:
        self.out.write("\n".join(lines) + "\n")
        self.out.flush()

    async def _sleep(self, seconds: float) -> None:
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self.stop.wait(), timeout=seconds)

    async def live(self) -> None:
        assert self.router is not None
        args = self.args
        endpoint = self.router.url
        gateways = {k: g.url for k, g in self.gateways.items()}
        self._print(header(endpoint, self.keys, self.fleet, gateways, self.access_log))
        loop = asyncio.get_running_loop()
        if args.duration is not None:
            loop.call_later(args.duration, self.stop.set)
        load_task: asyncio.Task[None] | None = None
        if args.load:
            self.load = LoadGenerator(
                endpoint, {"api": self.keys.api_key, "batch": self.keys.batch_key}, rps=args.load_rps
            )
            load_task = asyncio.create_task(self.load.run(), name="demo-load")
        probe = FleetProbe(
            endpoint, self.fleet, {k: s.urls for k, s in self.sims.items()}, status_key=self.keys.admin_key
        )
        clock = Clock()
        tty = self.out.isatty()
        term = LiveTerminal(self.out) if tty else None
        try:
            if args.no_live:
                await self.stop.wait()
                return
            if term is not None:
                term.hide_cursor()
            while not self.stop.is_set():
                frame = await probe.sample(clock.uptime())
                self._decorate(frame)
                if term is not None:
                    term.draw(render_table(frame, endpoint))
                    await self._sleep(args.interval)
                else:
                    self._print([render_summary(frame)])
                    await self._sleep(args.summary_every)
        finally:
            if term is not None:
                term.show_cursor()
            if load_task is not None:
                load_task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await load_task
            await probe.aclose()

    def _decorate(self, frame: FleetFrame) -> None:
        if self.load is not None:
            frame.load_line = self.load.stats.line(self.args.load_rps)
        if self.events is not None:
            frame.events = list(self.events.lines)

    # --- stop ------------------------------------------------------------------------------------
    async def shutdown(self) -> None:
        """Everything this demo started, outermost first: gateways, router, then the pod processes."""
        self._stopping = True
        await asyncio.gather(*(g.stop() for g in self.gateways.values()), return_exceptions=True)
        if self.router is not None:
            with contextlib.suppress(Exception):
                await self.router.stop()
        await asyncio.gather(*(s.stop() for s in self.sims.values()), return_exceptions=True)
        for w in self._watchers:
            w.cancel()
        await asyncio.gather(*self._watchers, return_exceptions=True)

    async def main(self) -> int:
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, self.stop.set)
        with tempfile.TemporaryDirectory(prefix="fleetgate-demo-") as tmp:
            try:
                if await self._until_stopped(self.start(Path(tmp))):
                    await self._until_stopped(self.live())
            except (ChildError, ConfigError, OSError) as exc:
                self.fail(str(exc))
            finally:
                await self.shutdown()
        if self.failure is not None:
            print(f"fleetgate demo: {self.failure}", file=sys.stderr, flush=True)
            return 1
        started = [f"{len(self.gateways)} gateways"] if self.gateways else []
        started += ["the global router"] if self.router is not None else []
        started += [f"{sum(s.pid is not None for s in self.sims.values())} simulator processes"]
        print(f"fleetgate demo: stopped {', '.join(started)}", file=sys.stderr, flush=True)
        return 0

    async def _until_stopped(self, work: Coroutine[Any, Any, None]) -> bool:
        """Run `work` unless a stop comes first (then cancel it); True when it completed."""
        task = asyncio.create_task(work)
        stopper = asyncio.create_task(self.stop.wait())
        try:
            await asyncio.wait({task, stopper}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            stopper.cancel()
        if not task.done():
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
            return False
        task.result()
        return True


def open_access_log(path: Path) -> Path:
    """Both tiers' access lines (logger `fleetgate.access`) as JSON to `path`, whatever the demo's
    log level: the demo's console shows warnings only, and its text format drops the fields."""
    from common.telemetry import JsonFormatter

    access = logging.getLogger("fleetgate.access")
    for h in list(access.handlers):
        access.removeHandler(h)
        h.close()
    handler = logging.FileHandler(path, encoding="utf-8")
    handler.setFormatter(JsonFormatter("fleetgate-demo"))
    access.addHandler(handler)
    access.setLevel(logging.INFO)
    access.propagate = False
    return path


def _setup_logging(level: str, live_on_tty: bool) -> _RecentEvents | None:
    """On a TTY with the live view, warnings show inside the view; otherwise they go to stderr."""
    root = logging.getLogger()
    root.setLevel(level.upper())
    for h in list(root.handlers):
        root.removeHandler(h)
    if live_on_tty:
        events = _RecentEvents()
        root.addHandler(events)
        return events
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    root.addHandler(handler)
    return None


def run(args: argparse.Namespace) -> int:
    try:
        validate(args)
    except ConfigError as exc:
        print(f"fleetgate demo: {exc}", file=sys.stderr)
        return 2
    if args.netns:
        from fleetgate.demo_netns import run_netns

        return asyncio.run(run_netns(args))
    events = _setup_logging(args.log_level, sys.stdout.isatty() and not args.no_live)
    logging.getLogger("httpx").setLevel(logging.WARNING)
    return runloop.run(_main(args, events))


async def _main(args: argparse.Namespace, events: _RecentEvents | None) -> int:
    return await Demo(args, sys.stdout, events).main()
