"""The live pool: what discovery found, what the scraper last saw, what the gateway has in flight.

Every stage of the data flow meets here: discovery writes endpoints, the scraper writes metrics,
the scheduler reads snapshots and the proxy counts in-flight requests. Nothing here does I/O.
"""

from __future__ import annotations

import time
from collections import Counter
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
    annotations: Mapping[str, str] = field(default_factory=dict)  # e.g. the pod's KV-events endpoint

    @property
    def hostport(self) -> str:
        return f"{self.address}:{self.port}"

    @property
    def url(self) -> str:
        return f"http://{self.address}:{self.port}"


@dataclass(frozen=True, slots=True)
class PodPerf:
    """How fast a pod serves, from its own latency histograms over a recent window (the capacity
    agent's TTFT/headroom estimates); None where the engine exports no such figure or has served nothing."""

    prefill_s: float | None = None  # start of running -> first token (queueing excluded)
    service_s: float | None = None  # how long a request holds a running slot (prefill + decode)
    itl_s: float | None = None  # time per output token of one running sequence
    footprint_tokens: float | None = None  # mean prompt + output tokens per request (KV per request)
    running_cap: int | None = None  # most requests seen running while others waited with KV to spare
    admit_gap_s: float | None = None  # window / requests leaving the engine queue in it (None: none did)
    speed_age_s: float = 0.0  # since a request last finished (the speed figures' age, see ServiceModel)
    cap_age_s: float = 0.0  # since `running_cap` was last seen holding


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
    perf: PodPerf | None = None  # measured service times (see PodPerf)


@dataclass(slots=True)
class PodState:
    endpoint: Endpoint
    metrics: PodMetrics | None = None
    consecutive_failures: int = 0
    stale: bool = True  # until the first good scrape
    models: frozenset[str] = frozenset()  # every name the pod serves: base_models | adapters
    base_models: frozenset[str] = frozenset()  # from /v1/models: entries without a parent
    adapters: frozenset[str] = frozenset()  # from /v1/models: LoRA adapters (entries with a parent)
    adapter_parents: Mapping[str, str] = field(default_factory=dict)  # adapter → base, as the pod says
    catalog_exact: bool = False  # the pod itself told base models from adapters (`set_catalog`)
    inflight: int = 0  # requests this gateway (all its worker processes) has sent and not yet finished
    local_inflight: int = 0  # ...of which this process sent (the rest: other workers, via the feed)
    dispatched_total: int = 0  # sent by this process, ever (the worker feed reports the increments)
    dispatched_since_scrape: int = 0  # sent since the last good scrape (a burst guard)
    ejected_until: float = 0.0  # time.monotonic() until which outlier detection keeps it out

    def ejected(self, now: float) -> bool:
        return self.ejected_until > now

    @property
    def name(self) -> str:
        return self.endpoint.name

    def metrics_age(self, now: float | None = None) -> float:
        if self.metrics is None:
            return float("inf")
        return (now if now is not None else time.monotonic()) - self.metrics.scraped_at


class ModelCatalog:
    """Pool-wide view of the pods' catalogs: how many pods list each name as a base model and as a
    LoRA adapter. Kept in step with every catalog change, so a scheduling decision learns whether
    its model is an adapter in O(1) instead of a pass over the pool."""

    def __init__(self) -> None:
        self._bases: Counter[str] = Counter()
        self._adapters: Counter[str] = Counter()
        self._inexact = 0  # pods listing names without telling base models from adapters
        self.version = 0  # bumps on every change (indexes by model rebuild when it moves)

    def is_adapter(self, name: str) -> bool:
        """Some pod lists `name` as a LoRA adapter."""
        return name in self._adapters

    def is_base_model(self, name: str) -> bool:
        """Some pod lists `name` without a parent (or without saying: `set_models`)."""
        return name in self._bases

    @property
    def exact(self) -> bool:
        """Every pod with a known list told base models from adapters; when False, engine LoRA
        gauges are the only other evidence of which names are adapters."""
        return self._inexact == 0

    def base_models(self) -> set[str]:
        return set(self._bases)

    def adapters(self) -> set[str]:
        return set(self._adapters)

    def tally(self, pod: PodState, step: int) -> None:
        """Count `pod`'s catalog in (+1) or out (-1); called by `EndpointPool` on every change."""
        self.version += 1
        for counter, names in ((self._bases, pod.base_models), (self._adapters, pod.adapters)):
            for n in names:
                c = counter[n] + step
                if c > 0:
                    counter[n] = c
                else:
                    del counter[n]
        if pod.models and not pod.catalog_exact:
            self._inexact += step


class EndpointPool:
    """The gateway's single source of truth about pods; cheap, lock-free (one event loop)."""

    def __init__(self) -> None:
        self._pods: dict[str, PodState] = {}
        self.version = 0  # bumps on membership change
        self.catalog = ModelCatalog()

    # --- discovery side -------------------------------------------------
    def set_endpoints(self, endpoints: Iterable[Endpoint]) -> None:
        """Replace membership; keeps state (metrics, in-flight) of pods that remain."""
        new = {e.name: e for e in endpoints}
        for name in list(self._pods):
            if name not in new:
                self.catalog.tally(self._pods.pop(name), -1)
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
        pod = self._pods.pop(name, None)
        if pod is not None:
            self.catalog.tally(pod, -1)
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
        """Served names with no base/adapter information: all count as base models, and the pod's
        catalog is not exact (consumers may still learn adapters from engine LoRA gauges)."""
        self._set(name, frozenset(models), frozenset(), {}, exact=False)

    def set_catalog(
        self, name: str, base_models: Iterable[str], adapters: Mapping[str, str] | Iterable[str]
    ) -> None:
        """The pod's exact catalog: its base models and its LoRA adapters (a mapping gives each
        adapter's parent base model, as vLLM's `/v1/models` does)."""
        parents = dict(adapters) if isinstance(adapters, Mapping) else {}
        lora = frozenset(adapters)
        self._set(name, frozenset(base_models) - lora, lora, parents, exact=True)

    def _set(
        self,
        name: str,
        bases: frozenset[str],
        adapters: frozenset[str],
        parents: dict[str, str],
        *,
        exact: bool,
    ) -> None:
        pod = self._pods.get(name)
        if pod is None:
            return
        if (
            pod.base_models == bases
            and pod.adapters == adapters
            and pod.catalog_exact == exact
            and pod.adapter_parents == parents
        ):
            return  # the usual periodic refresh: nothing changed
        self.catalog.tally(pod, -1)
        pod.base_models = bases
        pod.adapters = adapters
        pod.models = bases | adapters
        pod.adapter_parents = parents
        pod.catalog_exact = exact
        self.catalog.tally(pod, +1)

    # --- proxy side -----------------------------------------------------
    def acquire(self, name: str) -> None:
        pod = self._pods.get(name)
        if pod is not None:
            pod.inflight += 1
            pod.local_inflight += 1
            pod.dispatched_since_scrape += 1
            pod.dispatched_total += 1

    def release(self, name: str) -> None:
        pod = self._pods.get(name)
        if pod is not None and pod.local_inflight > 0:
            pod.inflight -= 1
            pod.local_inflight -= 1

    # --- readers --------------------------------------------------------
    def get(self, name: str) -> PodState | None:
        return self._pods.get(name)

    def pods(self) -> list[PodState]:
        return list(self._pods.values())

    def __len__(self) -> int:
        return len(self._pods)
