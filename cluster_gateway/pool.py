"""The live pool: what discovery found, what the scraper last saw, what the gateway has in flight.

Every stage of the data flow meets here: discovery writes endpoints, the scraper writes metrics,
the scheduler reads snapshots and the proxy counts in-flight requests. Nothing here does I/O.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Literal

EngineType = Literal["vllm", "sglang", "tgi"]


@dataclass(frozen=True, slots=True)
class Endpoint:
    """A model-server pod as discovery sees it. `name` is unique in the pool (pod name or URL)."""

    name: str
    address: str
    port: int
    engine: EngineType | None = None  # None: detect from the first scrape
    labels: Mapping[str, str] = field(default_factory=dict)

    @property
    def hostport(self) -> str:
        return f"{self.address}:{self.port}"

    @property
    def url(self) -> str:
        return f"http://{self.address}:{self.port}"


@dataclass(slots=True)
class PodMetrics:
    """One scrape's engine-neutral view of a pod. TGI has no KV or LoRA gauges (None / empty)."""

    engine: EngineType
    waiting: int = 0
    running: int = 0
    kv_usage: float | None = None  # 0..1
    running_adapters: frozenset[str] = frozenset()
    waiting_adapters: frozenset[str] = frozenset()
    max_lora: int = 0
    block_size: int | None = None
    num_gpu_blocks: int | None = None
    batch_max_tokens: int | None = None  # TGI: tgi_batch_current_max_tokens
    prefix_cache_hit_rate: float | None = None
    scraped_at: float = 0.0  # time.monotonic() of the scrape


@dataclass(slots=True)
class PodState:
    endpoint: Endpoint
    metrics: PodMetrics | None = None
    consecutive_failures: int = 0
    stale: bool = True  # until the first good scrape
    models: frozenset[str] = frozenset()  # base model + adapters from the pod's /v1/models
    inflight: int = 0  # requests this gateway has sent and not yet finished
    dispatched_since_scrape: int = 0  # sent since the last good scrape (a burst guard)

    @property
    def name(self) -> str:
        return self.endpoint.name

    def metrics_age(self, now: float | None = None) -> float:
        if self.metrics is None:
            return float("inf")
        return (now if now is not None else time.monotonic()) - self.metrics.scraped_at


class EndpointPool:
    """The gateway's single source of truth about pods; cheap, lock-free (one event loop)."""

    def __init__(self) -> None:
        self._pods: dict[str, PodState] = {}
        self.version = 0  # bumps on membership change

    # --- discovery side -------------------------------------------------
    def set_endpoints(self, endpoints: Iterable[Endpoint]) -> None:
        """Replace membership; keeps state (metrics, in-flight) of pods that remain."""
        new = {e.name: e for e in endpoints}
        for name in list(self._pods):
            if name not in new:
                del self._pods[name]
        for name, ep in new.items():
            cur = self._pods.get(name)
            if cur is None:
                self._pods[name] = PodState(endpoint=ep)
            elif cur.endpoint != ep:
                cur.endpoint = ep
        self.version += 1

    def upsert(self, endpoint: Endpoint) -> None:
        cur = self._pods.get(endpoint.name)
        if cur is None:
            self._pods[endpoint.name] = PodState(endpoint=endpoint)
        else:
            cur.endpoint = endpoint
        self.version += 1

    def remove(self, name: str) -> None:
        if self._pods.pop(name, None) is not None:
            self.version += 1

    # --- scraper side ---------------------------------------------------
    def record_scrape(self, name: str, metrics: PodMetrics) -> None:
        pod = self._pods.get(name)
        if pod is None:
            return
        pod.metrics = metrics
        pod.consecutive_failures = 0
        pod.stale = False
        pod.dispatched_since_scrape = 0

    def record_scrape_failure(self, name: str, stale_after: int) -> None:
        pod = self._pods.get(name)
        if pod is None:
            return
        pod.consecutive_failures += 1
        if pod.consecutive_failures >= stale_after:
            pod.stale = True

    def set_models(self, name: str, models: Iterable[str]) -> None:
        pod = self._pods.get(name)
        if pod is not None:
            pod.models = frozenset(models)

    # --- proxy side -----------------------------------------------------
    def acquire(self, name: str) -> None:
        pod = self._pods.get(name)
        if pod is not None:
            pod.inflight += 1
            pod.dispatched_since_scrape += 1

    def release(self, name: str) -> None:
        pod = self._pods.get(name)
        if pod is not None and pod.inflight > 0:
            pod.inflight -= 1

    # --- readers --------------------------------------------------------
    def get(self, name: str) -> PodState | None:
        return self._pods.get(name)

    def pods(self) -> list[PodState]:
        return list(self._pods.values())

    def __len__(self) -> int:
        return len(self._pods)
