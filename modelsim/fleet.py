"""Many simulated pods in one process and one event loop: the API tests, demo and bench use.

fleet = SimFleet([PodSpec(profile="tiny"), PodSpec(profile="tiny", adapters=["sql"])])
async with fleet:           # or fleet.start_in_thread() / fleet.stop_thread() from sync code
    fleet.urls               # ["http://127.0.0.1:PORT", ...]
    fleet.set_fault(0, "crash")
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import threading
from dataclasses import dataclass, field
from types import TracebackType
from typing import Any, Literal

from modelsim.faults import FaultState
from modelsim.kv_events import KVEventsConfig
from modelsim.pod import SimPod
from modelsim.profiles import get_profile

MetricsFormat = Literal["vllm", "sglang", "tgi"]


@dataclass
class PodSpec:
    profile: str = "h100-llama3-8b"  # hardware profile name (see profiles.py)
    model: str = "meta-llama/Llama-3.1-8B-Instruct"
    adapters: list[str] = field(default_factory=list)  # LoRA adapters this pod knows (/v1/models)
    preload_adapters: list[str] = field(default_factory=list)  # resident at start
    max_lora: int = 4
    metrics_format: MetricsFormat = "vllm"
    seed: int = 0
    time_scale: float = 1.0  # >1 slows everything uniformly (2-core machines)
    # engine overrides, mostly for tests
    kv_capacity_tokens: int | None = None
    max_num_seqs: int | None = None
    max_num_batched_tokens: int | None = None
    lora_load_s: float | None = None
    enable_prefix_caching: bool = True
    fault: str | None = None  # a fault mode set at start (e.g. "slow", "error")
    fault_params: dict[str, Any] = field(default_factory=dict)  # e.g. {"rate": 0.2, "status": 503}
    kv_events: KVEventsConfig | None = None  # publish vLLM KV-cache events (pod i: ports + i)
    prefix_hash_seed: str = "0"  # vLLM's PYTHONHASHSEED for sha256_cbor block hashes (with kv_events)

    def validate(self) -> None:
        """Raise ValueError naming the field for a spec the engine cannot run."""
        try:
            get_profile(self.profile)
        except ValueError as exc:
            raise ValueError(f"profile: {exc}") from None
        if not self.model:
            raise ValueError("model: must be a non-empty string")
        if self.metrics_format not in ("vllm", "sglang", "tgi"):
            raise ValueError(f"metrics_format: must be vllm, sglang or tgi (got {self.metrics_format!r})")
        if self.max_lora < 0:
            raise ValueError("max_lora: must be >= 0")
        if self.adapters and self.max_lora == 0:
            raise ValueError("max_lora: must be >= 1 when adapters are configured")
        if self.time_scale <= 0:
            raise ValueError("time_scale: must be > 0")
        for name in ("kv_capacity_tokens", "max_num_seqs", "max_num_batched_tokens"):
            v = getattr(self, name)
            if v is not None and v < 1:
                raise ValueError(f"{name}: must be >= 1")
        if self.lora_load_s is not None and self.lora_load_s < 0:
            raise ValueError("lora_load_s: must be >= 0")
        unknown = [a for a in self.preload_adapters if a not in self.adapters]
        if unknown:
            raise ValueError(f"preload_adapters: {unknown} not in adapters")
        if len(self.preload_adapters) > self.max_lora:
            raise ValueError(f"preload_adapters: more than max_lora={self.max_lora}")
        if self.model in self.adapters:
            raise ValueError("adapters: an adapter cannot have the base model's name")
        if self.fault is not None:
            try:
                FaultState.parse(self.fault, self.fault_params)
            except ValueError as exc:
                raise ValueError(f"fault: {exc}") from None


class SimFleet:
    def __init__(self, specs: list[PodSpec], host: str = "127.0.0.1", base_port: int = 0) -> None:
        for i, spec in enumerate(specs):
            try:
                spec.validate()
            except ValueError as exc:
                raise ValueError(f"pod {i}: {exc}") from None
        self.specs = list(specs)
        self.host = host
        self.base_port = base_port
        self.pods: list[SimPod] = [
            SimPod(i, spec, host, base_port + i if base_port else 0) for i, spec in enumerate(self.specs)
        ]
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._stop_event: asyncio.Event | None = None

    @property
    def urls(self) -> list[str]:
        return [p.url for p in self.pods]

    # -- async lifecycle --------------------------------------------------------------------------
    async def start(self) -> None:
        self._loop = asyncio.get_running_loop()
        started: list[SimPod] = []
        try:
            for pod in self.pods:
                await pod.start()
                started.append(pod)
                if pod.spec.fault:
                    pod.apply_fault(FaultState.parse(pod.spec.fault, pod.spec.fault_params))
        except BaseException:
            for pod in started:
                await pod.stop()
            raise

    async def stop(self) -> None:
        await asyncio.gather(*(pod.stop() for pod in self.pods), return_exceptions=True)

    async def __aenter__(self) -> SimFleet:
        await self.start()
        return self

    async def __aexit__(
        self, et: type[BaseException] | None, ev: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.stop()

    # -- its own loop in a daemon thread (sync tests, the openai client) --------------------------
    def start_in_thread(self, timeout: float = 30.0) -> None:
        ready: concurrent.futures.Future[None] = concurrent.futures.Future()

        async def main() -> None:
            self._stop_event = asyncio.Event()
            try:
                await self.start()
            except BaseException as exc:
                ready.set_exception(exc)
                return
            ready.set_result(None)
            await self._stop_event.wait()
            await self.stop()

        self._thread = threading.Thread(target=lambda: asyncio.run(main()), name="simfleet", daemon=True)
        self._thread.start()
        ready.result(timeout=timeout)

    def stop_thread(self, timeout: float = 30.0) -> None:
        if self._thread is None or self._loop is None or self._stop_event is None:
            return
        with contextlib.suppress(RuntimeError):
            self._loop.call_soon_threadsafe(self._stop_event.set)
        self._thread.join(timeout)
        self._thread = None

    # -- faults ---------------------------------------------------------------------------------
    def set_fault(self, index: int, mode: str, **params: Any) -> None:
        """Same as `POST /admin/faults` on pod `index` (ValueError naming the bad parameter)."""
        values = FaultState.parse(mode, params)
        pod = self.pods[index]
        self._call(lambda: pod.apply_fault(values))

    def state(self, index: int) -> dict[str, Any]:
        """The pod's /admin/state, without HTTP."""
        pod = self.pods[index]
        result: dict[str, Any] = self._call(pod.state)
        return result

    def _call(self, fn: Any) -> Any:
        loop = self._loop
        try:
            running = asyncio.get_running_loop()
        except RuntimeError:
            running = None
        if loop is None or running is loop:
            return fn()

        async def run() -> Any:
            return fn()

        return asyncio.run_coroutine_threadsafe(run(), loop).result(timeout=10)
