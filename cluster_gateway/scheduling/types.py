"""The scheduling contract: a request, the context a decision is made in, and the hook shapes.

A decision is filters (narrow the candidate pods) → scorers (each rates every candidate 0..1) →
a weighted sum per routing profile → a picker (ranked choice with fallbacks). Each of those is a
plugin (`plugin.py`) that defines the matching hook; profiles in config name the plugins.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

from cluster_gateway.pool import ModelCatalog, PodState
from cluster_gateway.scheduling.adapter_memory import AdapterEvidence
from cluster_gateway.scheduling.prefix_index import block_hashes
from common.http import OBJECTIVE_HEADER, PROFILE_HEADER, SHEDDABLE_HEADER
from common.openai_request import ParsedRequest
from common.request_log import REQUEST_ID_HEADER
from common.tokens import count_tokens

V = TypeVar("V")

if TYPE_CHECKING:
    from cluster_gateway.scheduling.plugin import Filtered
    from cluster_gateway.scheduling.profiles import ProfileSpec

_TRUE = frozenset({"true", "1", "yes", "on"})


@dataclass(slots=True)
class LLMRequest:
    model: str  # base model or a LoRA adapter name, as the client sent it
    prompt_text: str
    max_tokens: int | None
    stream: bool
    profile: str | None  # requested routing profile (validated by the scheduler; unknown → default)
    sheddable: bool = False
    request_id: str = ""
    _hashes: tuple[int, ...] | None = field(default=None, repr=False, compare=False)
    _hash_key: tuple[int, int, bool] = field(default=(0, 0, False), repr=False, compare=False)
    _tokens: int = field(default=-1, repr=False, compare=False)

    @classmethod
    def from_parsed(cls, parsed: ParsedRequest, headers: Mapping[str, str]) -> LLMRequest:
        """`headers` with lower-case names: what `client_headers` and the Envoy pickers' header maps
        give (HTTP/2 names are lower-case; the HTTP/1.1 servers here lower-case them)."""
        profile = headers.get(PROFILE_HEADER) or headers.get(OBJECTIVE_HEADER)
        shed = (headers.get(SHEDDABLE_HEADER) or "").strip().lower() in _TRUE
        return cls(
            model=parsed.model,
            prompt_text=parsed.prompt_text,
            max_tokens=parsed.max_tokens,
            stream=parsed.stream,
            profile=profile.strip() if profile and profile.strip() else None,
            sheddable=shed,
            request_id=headers.get(REQUEST_ID_HEADER) or "",
        )

    def block_hashes(self, block_chars: int, max_blocks: int, adapter: bool = False) -> tuple[int, ...]:
        """Prefix-index block hashes, computed once per request (schedule and dispatch share them).
        `adapter`: the model is a LoRA adapter, whose cached blocks are its own (`block_hashes`)."""
        key = (block_chars, max_blocks, adapter)
        if self._hashes is None or self._hash_key != key:
            self._hashes = block_hashes(
                self.prompt_text, block_chars, max_blocks, self.model if adapter else None
            )
            self._hash_key = key
        return self._hashes

    @property
    def prompt_tokens(self) -> int:
        if self._tokens < 0:
            self._tokens = count_tokens(self.prompt_text)
        return self._tokens


@dataclass(slots=True)
class SchedulingContext:
    """Everything one decision needs; plugins share derived per-pod values through `memo`.

    `degraded` is set by the scheduler when a filter answered `Filtered(degraded=True)`, so later
    filters can see it; plugins read it, they do not set it.
    """

    request: LLMRequest
    profile: ProfileSpec
    now: float
    staleness_s: float
    dead_after_failures: int
    evidence: AdapterEvidence = field(default_factory=AdapterEvidence)
    degraded: bool = False  # no candidate has fresh metrics: in-flight-only scoring
    memo: dict[str, Any] = field(default_factory=dict)  # per candidate list: cleared when it changes
    request_memo: dict[str, Any] = field(default_factory=dict)  # whatever the candidates (prefix matches)
    pool_positions: dict[str, int] = field(default_factory=dict)  # pod name → index in pool order
    pool_version: int = -1  # EndpointPool.version those positions belong to
    catalog: ModelCatalog | None = None  # the pool's base-model/adapter catalog (None: read the pods)
    _adapter_request: bool | None = field(default=None, repr=False)

    def is_adapter_request(self, pods: list[PodState]) -> bool:
        """Whether the requested model is a LoRA adapter, decided once per decision.

        A pod listing it as an adapter in `/v1/models` settles it from the first request on, before
        any engine runs it. Only while some pod's list did not tell adapters apart are the engines'
        LoRA gauges (running or waiting) consulted as well.
        """
        v = self._adapter_request
        if v is None:
            model = self.request.model
            cat = self.catalog
            if cat is not None:
                v = cat.is_adapter(model)
                exact = cat.exact
            else:
                v = any(model in p.adapters for p in pods)
                exact = all(p.catalog_exact or not p.models for p in pods)
            if not v and not exact:
                v = self.evidence.engine_reports_adapter(model, pods, self.now)
            self._adapter_request = v
        return v

    def est_queue(self, pods: list[PodState]) -> list[int]:
        """Waiting requests at the last scrape plus what this gateway sent since (the burst guard)."""
        q: list[int] | None = self.memo.get("est_queue")
        if q is None:
            q = self.memo["est_queue"] = [
                (m.waiting if (m := p.metrics) is not None else 0) + p.dispatched_since_scrape for p in pods
            ]
        return q

    def located(self, pods: list[PodState], by_name: Mapping[str, V]) -> list[tuple[int, str, V]]:
        """(position, name, value) of each candidate `by_name` holds, walking the shorter of the two:
        a plugin's per-pod state (prefix holders, backlogs) is usually a few pods of a large pool,
        and a two-stage sample is usually a few pods of a large holder set."""
        if len(by_name) > len(pods):
            get = by_name.get
            return [
                (i, p.endpoint.name, v) for i, p in enumerate(pods) if (v := get(p.endpoint.name)) is not None
            ]
        return [(i, name, v) for name, v in by_name.items() if (i := self.position(pods, name)) is not None]

    def position(self, pods: list[PodState], name: str) -> int | None:
        """Where pod `name` sits in the candidate list, without a pass over it in the common case.

        Candidates usually are the whole pool in pool order, so the pool-wide position (kept by the
        scheduler between membership changes) is tried first and verified; only when filters removed
        pods is the exact map built, once per decision.
        """
        i = self.pool_positions.get(name)
        if i is not None and i < len(pods) and pods[i].endpoint.name == name:
            return i
        idx: dict[str, int] | None = self.memo.get("pod_index")
        if idx is None:
            idx = self.memo["pod_index"] = {p.endpoint.name: k for k, p in enumerate(pods)}
        return idx.get(name)


class Filter(Protocol):
    name: str

    def filter(self, ctx: SchedulingContext, pods: list[PodState]) -> list[PodState] | Filtered: ...


class Scorer(Protocol):
    name: str

    def score(self, ctx: SchedulingContext, pods: list[PodState]) -> list[float]: ...


class Picker(Protocol):
    name: str

    def pick(self, ctx: SchedulingContext, scored: list[tuple[PodState, float]]) -> list[PodState]: ...


@dataclass
class ScheduleResult:
    pods: list[PodState]  # ranked: [choice, fallback, ...], never empty
    profile: str
    saturated: bool  # every candidate is saturated: the caller may queue or shed
    scores: dict[str, float]  # the chosen pod's score per scorer, plus "total"
    degraded: bool = False  # decided without fresh metrics (in-flight only)
    sheddable: bool = False  # the request (or its profile) may be shed first

    @property
    def pod(self) -> PodState:
        return self.pods[0]
