"""A multi-cluster Fleetgate in network namespaces: one namespace per cluster, a `global` one with the
router replicas, a `store` one with Redis, and a hub (`wan`) whose relay process is the only way
between them, so regions are really 20-150 ms apart and any link can be cut on its own.

```
 client (this process) --unix:ingress[-r]--+            (all links are relays in the hub namespace)
                                           v
   global ns: router r0 :8000/:50051, r1 :8001/:50052 --redis:rN--> store ns: redis :6379
        |  gw:<cid> (region latency)           ^ agent:<cid> (region latency, LB over r0/r1)
        v                                      |
   cluster ns <cid>: gateway :8080 + agent, `fleetgate sim` pods on 127.0.0.1:9000+
        ^ unix:local-<cid> (local traffic, no WAN)
```

Fixed ports are safe here: every namespace is private to one run. The client side of the test stays
in the host namespace and reaches in over Unix sockets (a path crosses namespaces, no test address
does). Every process is a real `python -m fleetgate ...` (or redis-server) child with its log in the
run's directory; `close()` kills them all and deletes the namespaces, whatever state the run is in.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import re
import secrets
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import yaml

from common.wanrelay import ControlClient
from fleetgate.netbed.netns import Namespaces
from fleetgate.netbed.topology import MODEL, ClusterPlan, Topology
from global_router.tenants import hash_key
from modelsim.profiles import get_profile

ROOT = Path(__file__).resolve().parents[2]  # the checkout, put on the children's PYTHONPATH
GATEWAY_PORT = 8080
SIM_BASE_PORT = 9000
ROUTER_HTTP_PORT = 8000  # replica r listens on 8000 + r
ROUTER_GRPC_PORT = 50051  # and 50051 + r
REDIS_PORT = 6379
REDIS_LINK_PORT = 6300  # replica r reaches Redis through the relay link on the hub at 6300 + r
MAX_REPLICAS = 16  # the fixed ports below reserve room for this many router replicas / pods
# every fixed port above, kept out of each namespace's ephemeral range (netns.Namespaces)
RESERVED_PORTS = (
    ",".join(
        f"{base}-{base + MAX_REPLICAS - 1}"
        for base in (REDIS_LINK_PORT, ROUTER_HTTP_PORT, ROUTER_GRPC_PORT, SIM_BASE_PORT)
    )
    + f",{GATEWAY_PORT},{REDIS_PORT}"
)
SIM_PROFILE = "tiny"
# SIGTERM (docs/drain.md): half a second of notice is plenty on the bed's links (a gateway also waits
# for the router's ack of its draining report), and in-flight requests finish well before
# NsProcess.stop's SIGKILL
DRAIN = {"drainNoticeS": 0.5, "drainTimeoutS": 10}
_PR_SET_PDEATHSIG = 1
_LIBC = ctypes.CDLL(None, use_errno=True) if sys.platform.startswith("linux") else None


def _die_with_parent() -> None:
    if _LIBC is not None:
        _LIBC.prctl(_PR_SET_PDEATHSIG, int(signal.SIGKILL))


class NsProcess:
    """One child process inside a namespace; each start logs to a fresh file that readiness polls."""

    def __init__(self, name: str, ns: str, argv: list[str], workdir: Path, nets: Namespaces) -> None:
        self.name = name
        self.ns = ns
        self.argv = argv
        self.workdir = workdir
        self.nets = nets
        self.proc: subprocess.Popen[bytes] | None = None
        self.starts = 0
        self.log_path = workdir / f"{name}.log"

    def start(self) -> None:
        if self.alive:
            raise RuntimeError(f"{self.name} is already running")
        self.starts += 1
        self.log_path = self.workdir / f"{self.name}.{self.starts}.log"
        env = {**os.environ, "PYTHONUNBUFFERED": "1"}
        env["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), env.get("PYTHONPATH", "")) if p)
        with self.log_path.open("wb") as log:
            self.proc = subprocess.Popen(
                self.nets.exec_argv(self.ns, self.argv),
                cwd=ROOT,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                env=env,
                start_new_session=True,
                preexec_fn=_die_with_parent,
            )

    @property
    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def log(self) -> str:
        try:
            return self.log_path.read_text(errors="replace")
        except OSError:
            return ""

    def wait_log(self, pattern: str, count: int = 1, timeout_s: float = 40.0) -> list[str]:
        """Poll this start's log until `pattern` matched `count` lines; group 1 of each (or the line)."""
        rx = re.compile(pattern, re.M)
        deadline = time.monotonic() + timeout_s
        while True:
            found = [m.group(1) if m.groups() else m.group(0) for m in rx.finditer(self.log())]
            if len(found) >= count:
                return found
            if not self.alive:
                raise RuntimeError(f"{self.name} exited ({self.code()}) before {pattern!r}:\n{self.tail()}")
            if time.monotonic() > deadline:
                raise RuntimeError(f"{self.name}: no {pattern!r} after {timeout_s:.0f} s:\n{self.tail()}")
            time.sleep(0.05)

    def code(self) -> int | None:
        return None if self.proc is None else self.proc.poll()

    def tail(self, lines: int = 15) -> str:
        return "\n".join(self.log().strip().splitlines()[-lines:])

    def stop(self, sig: int = signal.SIGTERM, timeout_s: float = 15.0) -> None:
        """Send `sig` and wait; SIGKILL what is still up after `timeout_s`. Always reaps."""
        p = self.proc
        if p is None:
            return
        if p.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                p.send_signal(sig)
            try:
                p.wait(timeout_s)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()


@dataclass
class Testbed:
    """One run's fleet; `start()` builds it, `close()` removes every trace of it."""

    __test__ = False  # not a pytest test class
    topo: Topology
    workdir: Path
    nets: Namespaces = field(default_factory=lambda: Namespaces(RESERVED_PORTS))
    procs: dict[str, NsProcess] = field(default_factory=dict)
    api_key: str = field(default_factory=lambda: "sk-tb-" + secrets.token_urlsafe(18))
    batch_key: str = field(default_factory=lambda: "sk-tb-batch-" + secrets.token_urlsafe(18))
    admin_key: str = field(default_factory=lambda: "sk-tb-admin-" + secrets.token_urlsafe(18))  # /fleet
    limited_key: str = field(default_factory=lambda: "sk-tb-limited-" + secrets.token_urlsafe(18))
    relay: ControlClient | None = None
    sockdir: Path = field(init=False)
    ips: dict[str, tuple[str, str]] = field(default_factory=dict)  # leaf -> (hub side, leaf side)

    def __post_init__(self) -> None:
        too_many = self.topo.routers > MAX_REPLICAS or any(c.pods > MAX_REPLICAS for c in self.topo.clusters)
        if too_many:  # their fixed ports would fall outside RESERVED_PORTS
            raise ValueError(f"the bed runs at most {MAX_REPLICAS} router replicas and pods per cluster")
        # Unix socket paths are limited to ~107 bytes: keep them short, outside pytest's deep tmp dirs
        self.sockdir = Path(tempfile.gettempdir()) / self.nets.tag
        self.sockdir.mkdir(mode=0o700)
        self._tokens = {c.cluster_id: secrets.token_urlsafe(24) for c in self.topo.clusters}

    # --- build ---------------------------------------------------------------------------------
    def start(self, timeout_s: float = 90.0) -> None:
        deadline = time.monotonic() + timeout_s
        self.nets.create_hub()
        self.ips["global"] = self.nets.add_leaf("global", 1)
        self.ips["store"] = self.nets.add_leaf("store", 2)
        for i, c in enumerate(self.topo.clusters):
            self.ips[c.cluster_id] = self.nets.add_leaf(f"c{i}", 10 + i)
        self._start_relay()
        self._add_links()
        redis = self._proc(
            "redis",
            "store",
            [
                shutil.which("redis-server") or "redis-server",
                *("--port", str(REDIS_PORT), "--bind", self.ips["store"][1]),
                *("--save", "", "--appendonly", "no", "--dir", str(self.workdir)),
                *("--protected-mode", "no"),  # reachable only inside this run's namespaces
            ],
        )
        redis.start()
        for r in range(self.topo.routers):
            self._write_router_config(r)
            self._proc(f"router{r}", "global", self._router_argv(r))
        for i, c in enumerate(self.topo.clusters):
            self._write_gateway_config(i, c)
            self._proc(f"sim-{c.cluster_id}", f"c{i}", self._sim_argv(c))
            gw_argv = ["-m", "fleetgate", "gateway", "--config", str(self.workdir / f"{c.cluster_id}.yaml")]
            self._proc(f"gw-{c.cluster_id}", f"c{i}", [sys.executable, *gw_argv, "--log-format", "text"])
        redis.wait_log(r"Ready to accept connections", timeout_s=_left(deadline))
        for p in self.procs.values():  # routers and pods first: each agent then meets its replica
            if p.name.startswith(("router", "sim-")):
                p.start()
        for r in range(self.topo.routers):
            self.procs[f"router{r}"].wait_log(r"global router listening on", timeout_s=_left(deadline))
        for c in self.topo.clusters:
            self.procs[f"gw-{c.cluster_id}"].start()
        for c in self.topo.clusters:
            self.procs[f"sim-{c.cluster_id}"].wait_log(r"listening on", c.pods, timeout_s=_left(deadline))
            self.procs[f"gw-{c.cluster_id}"].wait_log(
                r"cluster gateway .* listening on", timeout_s=_left(deadline)
            )
        self.wait_fresh([c.cluster_id for c in self.topo.clusters], within_s=_left(deadline))

    def _proc(self, name: str, leaf: str, argv: list[str]) -> NsProcess:
        p = NsProcess(name, self.nets.name(leaf), argv, self.workdir, self.nets)
        self.procs[name] = p
        return p

    def _start_relay(self) -> None:
        control = self.sockdir / "relay.sock"
        p = NsProcess(
            "relay",
            self.nets.hub,
            [sys.executable, "-m", "common.wanrelay", "--control", str(control)],
            self.workdir,
            self.nets,
        )
        self.procs["relay"] = p
        p.start()
        p.wait_log(r"wan relay control listening on")
        self.relay = ControlClient(str(control))

    def link(self, op: str, name: str, **fields: Any) -> dict[str, Any]:
        assert self.relay is not None
        return self.relay.call(op, name=name, **fields)

    def _add_links(self) -> None:
        g_hub, g_leaf = self.ips["global"]
        s_leaf = self.ips["store"][1]
        routers = range(self.topo.routers)
        for r in routers:
            self.link(
                "add",
                f"redis:{r}",
                listen=f"{g_hub}:{REDIS_LINK_PORT + r}",
                targets=[f"{s_leaf}:{REDIS_PORT}"],
            )
            self.link(
                "add",
                f"ingress:{r}",
                listen=f"unix:{self.sockdir / f'ingress-{r}.sock'}",
                targets=[f"{g_leaf}:{ROUTER_HTTP_PORT + r}"],
            )
        self.link(
            "add",
            "ingress",
            listen=f"unix:{self.sockdir / 'ingress.sock'}",
            targets=[f"{g_leaf}:{ROUTER_HTTP_PORT + r}" for r in routers],
            policy="round_robin",
        )
        for i, c in enumerate(self.topo.clusters):
            c_hub, c_leaf = self.ips[c.cluster_id]
            wan = {"latency_ms": self.topo.region_ms[c.region], "jitter_ms": self.topo.jitter_ms}
            # cluster i's agent prefers replica i mod R (an L4 balancer's spread), failing over in order
            order = [(i + k) % self.topo.routers for k in routers]
            self.link(
                "add",
                f"agent:{c.cluster_id}",
                listen=f"{c_hub}:{ROUTER_GRPC_PORT}",
                targets=[f"{g_leaf}:{ROUTER_GRPC_PORT + r}" for r in order],
                **wan,
            )
            self.link(
                "add",
                f"gw:{c.cluster_id}",
                listen=f"{g_hub}:{7000 + i}",
                targets=[f"{c_leaf}:{GATEWAY_PORT}"],
                **wan,
            )
            self.link(
                "add",
                f"local:{c.cluster_id}",
                listen=f"unix:{self.sockdir / f'local-{c.cluster_id}.sock'}",
                targets=[f"{c_leaf}:{GATEWAY_PORT}"],
            )

    def _write_router_config(self, r: int) -> None:
        data: dict[str, Any] = {
            "host": self.ips["global"][1],
            "region": "global",
            "redis": {
                "url": f"redis://{self.ips['global'][0]}:{REDIS_LINK_PORT + r}/0",
                "keyPrefix": "fleetgate-tb:",
                "reportTtlS": self.topo.redis_report_ttl_s,
            },
            "capacity": {
                "host": self.ips["global"][1],
                "reportIntervalMs": self.topo.report_interval_ms,
                "staleAfterS": self.topo.stale_after_s,
                "agents": [
                    {
                        "clusterId": c.cluster_id,
                        "tokenSha256": hash_key(self._tokens[c.cluster_id]),
                        # pinned to the gateway's one way in: its WAN link (docs/security.md)
                        "gatewayUrls": [self._gateway_url(i)],
                    }
                    for i, c in enumerate(self.topo.clusters)
                ],
            },
            "adminKeySha256": hash_key(self.admin_key),  # /fleet needs it (docs/security.md)
            "tenants": [
                {"name": "interactive", "apiKeySha256": [hash_key(self.api_key)]},
                {"name": "batch", "apiKeySha256": [hash_key(self.batch_key)], "trafficClass": "batch"},
                {
                    "name": "limited",
                    "apiKeySha256": [hash_key(self.limited_key)],
                    "requestsPerMinute": self.topo.limited_rpm,
                },
            ],
            "failover": {"ejectAfterFailures": 2, "ejectBaseS": 2, "connectTimeoutS": 1.0},
            "server": DRAIN,
            "selection": {"regionLatencyMs": self.topo.region_latency_matrix()},
        }
        (self.workdir / f"router{r}.yaml").write_text(yaml.safe_dump(data))

    def _router_argv(self, r: int) -> list[str]:
        return [
            sys.executable,
            *("-m", "fleetgate", "global-router", "--config", str(self.workdir / f"router{r}.yaml")),
            *("--port", str(ROUTER_HTTP_PORT + r), "--grpc-port", str(ROUTER_GRPC_PORT + r)),
            *("--log-format", "text"),
        ]

    def _sim_argv(self, c: ClusterPlan) -> list[str]:
        return [
            sys.executable,
            *("-m", "fleetgate", "sim", "--pods", str(c.pods), "--base-port", str(SIM_BASE_PORT)),
            *("--profile", SIM_PROFILE, "--time-scale", repr(self.topo.time_scale), "--log-level", "warning"),
        ]

    def _pod_performance(self) -> dict[str, float]:
        """What an operator quotes from a benchmark of the hardware (as the demo does), so a cluster
        that has not served yet is not judged on the agent's cautious default prior."""
        hw = get_profile(SIM_PROFILE)
        return {
            "prefillMs": round(hw.expected_ttft_s(600) * 1000.0 * self.topo.time_scale, 1),
            "decodeTokensPerSecond": round(1.0 / (hw.expected_itl_s(8, 600) * self.topo.time_scale), 1),
        }

    def _gateway_url(self, i: int) -> str:
        return f"http://{self.ips['global'][0]}:{7000 + i}"

    def _write_gateway_config(self, i: int, c: ClusterPlan) -> None:
        token = self.workdir / f"{c.cluster_id}.token"
        token.write_text(self._tokens[c.cluster_id])
        token.chmod(0o600)
        c_hub, c_leaf = self.ips[c.cluster_id]
        data = {
            "clusterId": c.cluster_id,
            "region": c.region,
            "host": c_leaf,
            "port": GATEWAY_PORT,
            "publicUrl": self._gateway_url(i),  # the router's way in: its WAN link
            "discovery": {
                "static": {"endpoints": [f"http://127.0.0.1:{SIM_BASE_PORT + k}" for k in range(c.pods)]}
            },
            "scrape": {"intervalMs": 100, "modelsRefreshS": 1},
            "server": DRAIN,
            "globalRouter": {
                "address": f"{c_hub}:{ROUTER_GRPC_PORT}",
                "tokenFile": str(token),
                "reportIntervalMs": self.topo.report_interval_ms,
            },
            "capacity": {"costPerGpuHour": c.cost_per_gpu_hour, "podPerformance": self._pod_performance()},
        }
        (self.workdir / f"{c.cluster_id}.yaml").write_text(yaml.safe_dump(data))

    # --- drive ---------------------------------------------------------------------------------
    def partition(self, link: str, mode: str = "full") -> None:
        self.link("set", link, partition=mode)

    def heal(self, link: str) -> None:
        self.link("set", link, partition="none")

    def ingress(self, replica: int | None = None) -> str:
        return str(self.sockdir / ("ingress.sock" if replica is None else f"ingress-{replica}.sock"))

    def local(self, cluster_id: str) -> str:
        return str(self.sockdir / f"local-{cluster_id}.sock")

    def client(self, uds: str, *, timeout_s: float = 30.0, keepalive: bool = True) -> httpx.AsyncClient:
        """An HTTP client whose every connection enters the bed through the Unix socket `uds`."""
        limits = httpx.Limits(max_connections=200, max_keepalive_connections=20 if keepalive else 0)
        transport = httpx.AsyncHTTPTransport(uds=uds, limits=limits)
        return httpx.AsyncClient(transport=transport, base_url="http://fleetgate.test", timeout=timeout_s)

    def auth(self, *, batch: bool = False, region: str | None = None) -> dict[str, str]:
        h = {"authorization": f"Bearer {self.batch_key if batch else self.api_key}"}
        if region is not None:
            h["x-fleetgate-client-region"] = region
        return h

    def fleet(self, replica: int) -> dict[str, Any]:
        transport = httpx.HTTPTransport(uds=self.ingress(replica))
        with httpx.Client(transport=transport, base_url="http://fleetgate.test", timeout=5.0) as c:
            r = c.get("/fleet", headers={"authorization": f"Bearer {self.admin_key}"})
            doc: dict[str, Any] = r.raise_for_status().json()
            return doc

    def fresh_at(self, replica: int) -> set[str]:
        """Clusters replica `replica` sees fresh, not draining, with a ready pod serving MODEL."""
        return {c["id"] for c in self._in_rotation(replica) if c["fresh"]}

    def routable_at(self, replica: int) -> set[str]:
        """Clusters replica `replica` would route MODEL to: fresh, or stale on last-known data
        (static stability: a stale report keeps its cluster in rotation until it is forgotten)."""
        return {c["id"] for c in self._in_rotation(replica)}

    def _in_rotation(self, replica: int) -> list[dict[str, Any]]:
        try:
            doc = self.fleet(replica)
        except (httpx.HTTPError, ValueError):
            return []
        return [
            c
            for c in doc["clusters"]
            if not c["draining"]
            and not c["router_drain"]
            and c["models"].get(MODEL, {}).get("ready_pods", 0) > 0
        ]

    def wait_fresh(
        self, cluster_ids: list[str], within_s: float = 30.0, replicas: list[int] | None = None
    ) -> None:
        want = set(cluster_ids)
        reps = list(range(self.topo.routers)) if replicas is None else replicas
        wait_until(
            lambda: all(want <= self.fresh_at(r) for r in reps),
            within_s,
            f"clusters {sorted(want)} fresh at replicas {reps}",
        )

    def restart(self, name: str, *, sig: int = signal.SIGTERM, ready: str, timeout_s: float = 40.0) -> None:
        """Stop process `name` with `sig` (graceful SIGTERM by default), start it again, wait for `ready`."""
        p = self.procs[name]
        p.stop(sig)
        p.start()
        p.wait_log(ready, timeout_s=timeout_s)

    def agent_connected(self, replica: int, cluster_id: str, start: int | None = None) -> bool:
        """Has this start (or start number `start`) of the replica logged the agent's connection?"""
        p = self.procs[f"router{replica}"]
        log = p.log() if start is None else (self.workdir / f"router{replica}.{start}.log").read_text()
        return f"agent for cluster '{cluster_id}' connected" in log

    # --- teardown ------------------------------------------------------------------------------
    def close(self) -> list[str]:
        """Kill every child (SIGTERM, then SIGKILL), delete every namespace; returns what failed."""
        problems = []
        for p in self.procs.values():
            if p.proc is not None and p.proc.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    p.proc.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + 5.0
        for p in self.procs.values():
            if p.proc is None:
                continue
            try:
                p.proc.wait(max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                p.proc.kill()
                p.proc.wait()
        problems += self.nets.delete_all()
        shutil.rmtree(self.sockdir, ignore_errors=True)
        return problems


def _left(deadline: float) -> float:
    return max(1.0, deadline - time.monotonic())


def wait_until(cond: Callable[[], bool], within_s: float, what: str, every_s: float = 0.1) -> None:
    deadline = time.monotonic() + within_s
    while not cond():
        if time.monotonic() > deadline:
            raise TimeoutError(f"timed out after {within_s:.0f} s waiting for {what}")
        time.sleep(every_s)
