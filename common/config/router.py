"""Schema of the global router's config file (Tier 2)."""

from __future__ import annotations

from typing import Annotated, Literal

import msgspec
from msgspec import Meta, Struct

from common.config.gateway import PluginConfig
from common.config.server import HttpServer

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


class GatewayCredential(_Base, kw_only=True):
    """How the router proves itself to one cluster's gateway (that gateway's `auth:`).

    The router needs the secret itself in both modes (it signs with it or sends it), so it comes
    from a file (a mounted Secret; one secret per line, the first is used) or an env variable.
    """

    mode: Literal["hmac", "bearer"] = "hmac"
    secret_file: str | None = None
    secret_env: str | None = None

    def __post_init__(self) -> None:
        if (self.secret_file is None) == (self.secret_env is None):
            raise ValueError("set exactly one of `secretFile` or `secretEnv`")


class AgentAuth(_Base, kw_only=True):
    """A cluster allowed to report, and what its reports may claim (docs/security.md).

    Its bearer token is stored as a SHA-256 hex digest only. `gatewayUrls` (exact URLs) and/or
    `gatewayHosts` (host patterns like `*.us-east.internal`, any port) pin where the cluster's
    gateway may be; one of them is required, so a stolen agent token cannot point traffic
    elsewhere. Loopback gateways are refused unless `allowLoopback` (local demos and tests);
    link-local/metadata addresses and the router's own listeners are always refused.
    """

    cluster_id: Annotated[str, Meta(min_length=1)]
    token_sha256: Annotated[str, Meta(pattern="^[0-9a-f]{64}$")]
    gateway_urls: list[str] = msgspec.field(default_factory=list)
    gateway_hosts: list[str] = msgspec.field(default_factory=list)
    allow_loopback: bool = False
    gateway_auth: GatewayCredential | None = None  # None: the gateway runs without auth (warned)

    def __post_init__(self) -> None:
        if not self.gateway_urls and not self.gateway_hosts:
            raise ValueError(
                "pin the cluster's gateway: set `gatewayUrls` (exact URLs) or `gatewayHosts` (host patterns)"
            )


class ReportLimits(_Base, kw_only=True):
    """Plausibility caps: a report claiming more is refused (it could only be a bug or an attack)."""

    max_headroom_per_pod: Annotated[int, Meta(ge=1)] = 1024  # headroomRequests <= readyPods x this
    max_running_per_pod: Annotated[int, Meta(ge=1)] = 4096  # running + queued per ready pod
    max_ready_pods: Annotated[int, Meta(ge=1)] = 100_000
    max_models: Annotated[int, Meta(ge=1)] = 1024
    max_adapters: Annotated[int, Meta(ge=1)] = 4096  # per model
    max_tokens_per_second_per_pod: PositiveFloat = 1_000_000.0


class CapacityServer(_Base, kw_only=True):
    host: str = "127.0.0.1"
    port: Port = 50051
    report_interval_ms: Annotated[int, Meta(ge=50)] = 1000
    # a cluster silent this long is "stale": still routed to (on aged figures, staleness.py) until
    # requests to it fail or it is silent for forgetAfterS (static stability: see
    # docs/global-router-resilience.md)
    stale_after_s: PositiveFloat = 3.0
    forget_after_s: PositiveFloat = 300.0
    tls_cert_file: str | None = None
    tls_key_file: str | None = None
    agents: list[AgentAuth] = msgspec.field(default_factory=list)
    limits: ReportLimits = msgspec.field(default_factory=ReportLimits)


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
    plugin_weights: dict[str, NonNegFloat] = msgspec.field(
        default_factory=dict
    )  # `selection.plugins` by name
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
    plugins: list[PluginConfig] = msgspec.field(default_factory=list)  # more cluster scorers
    spot_discount_risk: Annotated[float, Meta(ge=0, le=1)] = 0.1  # spot cost is inflated by this risk
    region_latency_ms: dict[str, dict[str, NonNegFloat]] = msgspec.field(default_factory=dict)
    # client region -> cluster region latency when the matrix has no entry (same region: 0)
    cross_region_latency_ms: NonNegFloat = 80.0
    # an adapter request to a cluster where no pod has the adapter loaded pays its load first
    adapter_load_penalty_ms: NonNegFloat = 150.0
    # at most this is added to a stale cluster's predicted TTFT (growing with the report's age): keep
    # it below any cross-region latency (global_router/staleness.py)
    stale_penalty_ms: NonNegFloat = 20.0
    # a model served by more clusters than this is decided over a short list of them: the best by
    # live headroom, by cost, by TTFT estimate and by headroom in the client's region, plus a few at
    # random (docs/scale.md); 0 = always score every cluster
    max_scored: Annotated[int, Meta(ge=0, le=10_000)] = 10
    # requests of headroom that are "enough": clusters with at least this much room score the same on
    # headroom, so region latency and TTFT decide between them, and more room only wins when a cluster
    # is short (global_router/selection.py)
    ample_headroom: Annotated[int, Meta(ge=1, le=100_000)] = 4


class Failover(_Base, kw_only=True):
    max_attempts: Annotated[int, Meta(ge=1, le=10)] = 3
    retry_budget_ratio: Annotated[float, Meta(ge=0, le=1)] = 0.2  # retries ≤ 20% of recent requests
    eject_after_failures: Annotated[int, Meta(ge=1)] = 3
    eject_base_s: PositiveFloat = 1.0
    eject_max_s: PositiveFloat = 30.0
    min_retries: Annotated[int, Meta(ge=0)] = 5  # retries always allowed per window, however quiet
    retry_window_s: PositiveFloat = 10.0
    connect_timeout_s: PositiveFloat = 2.0
    # from sending a request until the gateway acknowledges it (its interim 100 Continue, or any
    # response head): a path that accepts connections but answers nothing (black-holed while the
    # cluster's reports still arrive) fails over after this and ejects the cluster, instead of after
    # firstByteTimeoutS; above the longest round trip to a gateway plus 50 ms (a gateway holds the
    # 100 that long for a request that came whole, in case its answer is out first). 0 = no ack deadline
    # (docs/global-router-resilience.md)
    ack_timeout_s: NonNegFloat = 3.0
    # until the gateway's first body chunk: longer than a gateway's own queue wait plus its pod
    # retries (10 s + 3 x 60 s by default), so the gateway, which can retry safely, decides first
    first_byte_timeout_s: PositiveFloat = 200.0
    read_timeout_s: PositiveFloat = 150.0  # the longest gap between two chunks once streaming
    idle_connection_s: PositiveFloat = 60.0  # keep-alive reuse window (gateways keep 75 s)
    max_connections_per_gateway: Annotated[int, Meta(ge=1)] = 8192


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
    server: HttpServer = msgspec.field(default_factory=HttpServer)
    access_log: bool = True  # one JSON line per request on logger fleetgate.access (common/request_log.py)
    rate_limits: RateLimitSettings = msgspec.field(default_factory=RateLimitSettings)
    admin_key_sha256: Annotated[str, Meta(pattern="^[0-9a-f]{64}$")] | None = None  # POST /admin/*
    # `/` and `/fleet` need the admin key or a read-only key by default; True: open, without gateway URLs
    public_status: bool = False
    status_key_sha256: list[Annotated[str, Meta(pattern="^[0-9a-f]{64}$")]] = msgspec.field(
        default_factory=list
    )  # read-only keys for `/` and `/fleet` (SHA-256 hex, like tenants' keys)
