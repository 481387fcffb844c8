"""One simulated pod: engine + HTTP server on its own port, with crash/restart control."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket
from typing import TYPE_CHECKING, Any

import uvicorn

from common.listen_error import ListenError
from modelsim.app import SimApp
from modelsim.engine import Engine
from modelsim.faults import FaultState
from modelsim.kv_events import KVEventPublisher
from modelsim.metrics_text import MetricsExporter
from modelsim.profiles import get_profile, with_overrides
from modelsim.textgen import FillerText

if TYPE_CHECKING:
    from modelsim.fleet import PodSpec

log = logging.getLogger("modelsim")


def _listen_socket(host: str, port: int) -> socket.socket:
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    try:
        sock.bind((host, port))
        sock.listen(2048)
    except OSError as exc:
        sock.close()
        raise ListenError(host, port, exc) from None
    sock.setblocking(False)
    return sock


class SimPod:
    def __init__(self, index: int, spec: PodSpec, host: str = "127.0.0.1", port: int = 0) -> None:
        self.index = index
        self.spec = spec
        self.host = host
        self.port = port
        profile = with_overrides(
            get_profile(spec.profile),
            kv_capacity_tokens=spec.kv_capacity_tokens,
            max_num_seqs=spec.max_num_seqs,
            max_num_batched_tokens=spec.max_num_batched_tokens,
            lora_load_s=spec.lora_load_s,
        )
        adapters = {a: f"/adapters/{a}" for a in spec.adapters}
        self.kv_events = (
            KVEventPublisher(spec.kv_events.for_pod(index, host)) if spec.kv_events is not None else None
        )
        self.engine = Engine(
            profile,
            spec.model,
            adapters=adapters,
            preload_adapters=spec.preload_adapters,
            max_lora=spec.max_lora,
            seed=spec.seed,
            time_scale=spec.time_scale,
            enable_prefix_caching=spec.enable_prefix_caching,
            tag=str(index),
            kv_publisher=self.kv_events,
            prefix_hash_seed=spec.prefix_hash_seed,
        )
        self.faults = FaultState(seed=spec.seed)
        self.exporter = MetricsExporter(self.engine, spec.metrics_format)
        self.filler = FillerText(spec.seed)
        self.app = SimApp(self)
        self._server: uvicorn.Server | None = None
        self._stopping = False
        self.listening = False

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    @property
    def faults_mode(self) -> str:
        return self.faults.mode

    async def start(self) -> None:
        config = uvicorn.Config(
            self.app,
            lifespan="off",
            http="h11",
            ws="none",
            log_level="warning",
            access_log=False,
            proxy_headers=False,
            server_header=False,
            date_header=False,
            timeout_keep_alive=30,
            timeout_graceful_shutdown=1,
        )
        config.load()
        self._server = uvicorn.Server(config)
        self._server.lifespan = config.lifespan_class(config)
        await self._listen()
        self.engine.start()
        if self.kv_events is not None:
            self.kv_events.start()

    async def _listen(self) -> None:
        assert self._server is not None
        sock = _listen_socket(self.host, self.port)
        self.port = int(sock.getsockname()[1])
        await self._server.startup(sockets=[sock])
        self.listening = True

    def _stop_listening(self) -> None:
        """Like a process dying: the port refuses connections and open ones are reset."""
        srv = self._server
        if srv is None:
            return
        for s in getattr(srv, "servers", []):
            s.close()
        for conn in list(srv.server_state.connections):
            transport = getattr(conn, "transport", None)
            if transport is not None:
                transport.abort()
        self.listening = False

    async def stop(self) -> None:
        self._stopping = True
        await self.engine.stop()
        if self.kv_events is not None:
            await self.kv_events.close()
        if self.faults.mode != "none":
            self.faults.apply({"mode": "none"})  # release hung handlers; the engine now refuses work
        srv = self._server
        if srv is None:
            return
        if self.listening:
            for s in srv.servers:
                s.close()
            for conn in list(srv.server_state.connections):
                conn.shutdown()
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(2):
                    while srv.server_state.connections:  # noqa: ASYNC110 - uvicorn exposes no event
                        await asyncio.sleep(0.02)
            for conn in list(srv.server_state.connections):
                transport = getattr(conn, "transport", None)
                if transport is not None:
                    transport.abort()
            for t in list(srv.server_state.tasks):
                t.cancel()
        self.listening = False
        self._server = None

    # -- faults ---------------------------------------------------------------------------------
    def apply_fault(self, values: dict[str, Any]) -> None:
        """Switch fault mode (values already validated by FaultState.parse); on the pod's loop."""
        prev = self.faults.mode
        self.faults.apply(values, on_expire=self._expire_fault)
        mode = self.faults.mode
        self.engine.slow_factor = self.faults.factor if mode == "slow" else 1.0
        if mode == "stale" and self.faults.frozen_metrics is None:
            self.faults.frozen_metrics = self.exporter.last or self.exporter.render()
        if mode == "crash" and prev != "crash":
            self._stop_listening()
            self.engine.reset()
            log.warning("pod %d crashed (fault): %s refuses connections", self.index, self.url)
        elif prev == "crash" and mode != "crash":
            try:
                sock = _listen_socket(self.host, self.port)  # listening again before this returns
            except OSError as exc:
                log.error("pod %d cannot listen on %s again (%s); retrying", self.index, self.url, exc)
                asyncio.get_running_loop().create_task(self._resume(None))
                return
            asyncio.get_running_loop().create_task(self._resume(sock))
            log.warning("pod %d restarted after crash fault: %s", self.index, self.url)

    async def _resume(self, sock: socket.socket | None) -> None:
        """Serve on the re-bound socket (or keep trying to bind it, e.g. the port is briefly taken)."""
        attempts = 0
        while sock is None:
            attempts += 1
            await asyncio.sleep(0.2)
            if self.faults.mode == "crash" or self._stopping:
                return  # crashed again or stopped meanwhile
            try:
                sock = _listen_socket(self.host, self.port)
            except OSError:
                if attempts >= 50:
                    log.error("pod %d gave up listening on %s", self.index, self.url)
                    return
        srv = self._server
        if srv is None or self._stopping:
            sock.close()
            return
        await srv.startup(sockets=[sock])
        if self._stopping:  # stop() ran while we were starting up
            for s in srv.servers:
                s.close()
            return
        self.listening = True

    def _expire_fault(self) -> None:
        self.apply_fault({"mode": "none"})

    def state(self) -> dict[str, Any]:
        st = self.engine.snapshot()
        st["pod"] = {"index": self.index, "url": self.url, "metrics_format": self.exporter.format}
        st["fault"] = self.faults.describe()
        return st
