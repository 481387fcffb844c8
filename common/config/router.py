"""Schema of the global router's config file (Tier 2)."""

from __future__ import annotations

from typing import Annotated, Literal

import msgspec
from msgspec import Meta, Struct

Port = Annotated[int, Meta(ge=1, le=65535)]
NonNegFloat = Annotated[float, Meta(ge=0)]
PositiveFloat = Annotated[float, Meta(gt=0)]
TrafficClass = Literal["interactive", "batch"]


class _Base(Struct, rename="camel", forbid_unknown_fields=True, kw_only=True, omit_defaults=True):
    pass


class RedisConfig(_Base, kw_only=True):
    url: str  # redis://host:port/db ; with it every replica shares fleet view and rate limits
    key_prefix: str = "fleetgate:"
    fail_mode: Literal["open", "closed"] = "open"  # rate limits when Redis is down
    # fail-open before any replica count is known: this replica's share of each limit (afterwards the
    # share is 1 / the replicas announced in Redis; see docs/global-router-resilience.md)
    local_share: Annotated[float, Meta(gt=0, le=1)] = 0.5
    report_ttl_s: PositiveFloat = 10.0  # floor of a report key's TTL (the TTL is max(this, forgetAfterS))
    timeout_s: PositiveFloat = 0.25  # floor of the Redis call timeout (it adapts to measured latency)
    max_timeout_s: PositiveFloat = 2.0  # ceiling of the adaptive timeout
    breaker_failures: Annotated[int, Meta(ge=1)] = 2  # consecutive failures that open the breaker
    breaker_open_s: PositiveFloat = 0.5  # first open period (doubles per failed half-open probe)
    breaker_max_open_s: PositiveFloat = 5.0
    replica_ttl_s: Annotated[float, Meta(ge=1)] = 10.0  # a replica's announcement lives this long
    max_connections: Annotated[int, Meta(ge=1)] = 64  # pooled, reused Redis connections per replica


class AgentAuth(_Base, kw_only=True):
    """A cluster allowed to report; its bearer token is stored as a SHA-256 hex digest only."""

    cluster_id: str
    token_sha256: Annotated[str, Meta(pattern="^[0-9a-f]{64}$")]


class CapacityServer(_Base, kw_only=True):
    host: str = "127.0.0.1"
    port: Port = 50051
    report_interval_ms: Annotated[int, Meta(ge=50)] = 1000
    # a cluster silent this long is "stale": still routed to (behind fresh ones, figures aged) until
    # requests to it fail or it is silent for forgetAfterS (static stability: see
    # docs/global-router-resilience.md)
    stale_after_s: PositiveFloat = 3.0
    forget_after_s: PositiveFloat = 300.0
    tls_cert_file: str | None = None
    tls_key_file: str | None = None
    agents: list[AgentAuth] = msgspec.field(default_factory=list)


class Tenant(_Base, kw_only=True):
    name: str
    api_key_sha256: list[Annotated[str, Meta(pattern="^[0-9a-f]{64}$")]]
    requests_per_minute: Annotated[int, Meta(ge=0)] = 0  # 0 = unlimited
    tokens_per_minute: Annotated[int, Meta(ge=0)] = 0
    max_concurrency: Annotated[int, Meta(ge=0)] = 0
    allowed_models: list[str] | None = None  # None: all
    traffic_class: TrafficClass = "interactive"
    sheddable: bool = False  # refused first when the fleet is saturated


class SelectionWeights(_Base, kw_only=True):
    headroom: NonNegFloat = 2.0
    queue: NonNegFloat = 1.0
    ttft: NonNegFloat = 2.0
    region: NonNegFloat = 1.0
    cost: NonNegFloat = 1.0


class TrafficClassPolicy(_Base, kw_only=True):
    weights: SelectionWeights = msgspec.field(default_factory=SelectionWeights)
    ttft_target_ms: PositiveFloat | None = None  # interactive: clusters predicted over it rank last
    gateway_profile: str = "latency"  # passed down as x-fleetgate-profile


def _default_classes() -> dict[str, TrafficClassPolicy]:
    return {
        "interactive": TrafficClassPolicy(ttft_target_ms=800.0, gateway_profile="latency"),
        "batch": TrafficClassPolicy(
            weights=SelectionWeights(headroom=1.0, queue=0.5, ttft=0.0, region=0.0, cost=4.0),
            gateway_profile="throughput",
        ),
    }


class Selection(_Base, kw_only=True):
    classes: dict[str, TrafficClassPolicy] = msgspec.field(default_factory=_default_classes)
    spot_discount_risk: Annotated[float, Meta(ge=0, le=1)] = 0.1  # spot cost is inflated by this risk
    region_latency_ms: dict[str, dict[str, NonNegFloat]] = msgspec.field(default_factory=dict)
    # client region -> cluster region latency when the matrix has no entry (same region: 0)
    cross_region_latency_ms: NonNegFloat = 80.0
    # an adapter request to a cluster where no pod has the adapter loaded pays its load first
    adapter_load_penalty_ms: NonNegFloat = 150.0


class Failover(_Base, kw_only=True):
    max_attempts: Annotated[int, Meta(ge=1, le=10)] = 3
    retry_budget_ratio: Annotated[float, Meta(ge=0, le=1)] = 0.2  # retries ≤ 20% of recent requests
    eject_after_failures: Annotated[int, Meta(ge=1)] = 3
    eject_base_s: PositiveFloat = 1.0
    eject_max_s: PositiveFloat = 30.0
    min_retries: Annotated[int, Meta(ge=0)] = 5  # retries always allowed per window, however quiet
    retry_window_s: PositiveFloat = 10.0
    connect_timeout_s: PositiveFloat = 2.0
    read_timeout_s: PositiveFloat = 600.0


class RateLimitSettings(_Base, kw_only=True):
    default_max_tokens: Annotated[int, Meta(ge=1)] = 256  # reserved when a request sets no max_tokens
    concurrency_lease_s: Annotated[float, Meta(ge=1)] = 30.0  # a crashed replica's slots free after this
    fail_closed_status: Literal[429, 503] = 503


class GlobalRouterConfig(_Base, kw_only=True):
    host: str = "127.0.0.1"
    port: Port = 8000
    region: str = "global"
    redis: RedisConfig | None = None
    capacity: CapacityServer = msgspec.field(default_factory=CapacityServer)
    tenants: list[Tenant] = msgspec.field(default_factory=list)
    allow_anonymous: bool = False  # True only for local trials: no key needed
    selection: Selection = msgspec.field(default_factory=Selection)
    failover: Failover = msgspec.field(default_factory=Failover)
    max_body_bytes: Annotated[int, Meta(ge=1024)] = 8 * 1024 * 1024
    rate_limits: RateLimitSettings = msgspec.field(default_factory=RateLimitSettings)
    admin_key_sha256: Annotated[str, Meta(pattern="^[0-9a-f]{64}$")] | None = None  # POST /admin/*
    public_status: bool = True  # False: `/` and `/fleet` need the admin key too (they show gateway URLs)
