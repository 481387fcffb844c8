"""Schema of a cluster gateway's config file, identical to the `FleetgateGateway` CRD's `spec`.

YAML keys are camelCase (Kubernetes convention); Python attributes are snake_case.
Defaults follow the Gateway API Inference Extension reference values where one exists.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

import msgspec
from msgspec import Meta, Struct

from common.config.server import HttpServer

Port = Annotated[int, Meta(ge=1, le=65535)]
PositiveFloat = Annotated[float, Meta(gt=0)]
NonNegFloat = Annotated[float, Meta(ge=0)]
Fraction = Annotated[float, Meta(ge=0, le=1)]
Engine = Literal["auto", "vllm", "sglang", "tgi"]


class _Base(Struct, rename="camel", forbid_unknown_fields=True, kw_only=True, omit_defaults=True):
    pass


class StaticEndpoint(_Base, kw_only=True):
    """One pod by URL, optionally with its engine, labels (e.g. for heterogeneous static pools) and
    annotations (e.g. `fleetgate.io/kv-events-endpoint` for the `precise_prefix` scorer,
    `fleetgate.io/prefill-tokens-per-second` for a pool of mixed GPUs)."""

    url: str
    engine: Engine = "auto"
    labels: dict[str, str] = msgspec.field(default_factory=dict)
    annotations: dict[str, str] = msgspec.field(default_factory=dict)


class StaticDiscovery(_Base, kw_only=True):
    endpoints: list[StaticEndpoint | str] = msgspec.field(default_factory=list)


class LabelSelector(_Base, kw_only=True):
    match_labels: dict[str, str] = msgspec.field(default_factory=dict)


class KubernetesDiscovery(_Base, kw_only=True):
    """Pods come from an upstream InferencePool (by name) or from this selector."""

    namespace: str = "default"
    inference_pool: str | None = None
    selector: LabelSelector | None = None
    target_port: Port = 8000
    kubeconfig: str | None = None  # None: in-cluster config, else this file


class Discovery(_Base, kw_only=True):
    static: StaticDiscovery | None = None
    kubernetes: KubernetesDiscovery | None = None

    def __post_init__(self) -> None:
        if (self.static is None) == (self.kubernetes is None):
            raise ValueError("exactly one of `static` or `kubernetes` must be set")


class ScrapeSharing(_Base, kw_only=True):
    """Gateway replicas split the pods between them (a consistent-hash ring over the replicas that
    answer) and pull each other's samples, so each pod is scraped once per interval however many
    replicas run; see docs/scraping.md. `peers`: the replicas' sharing endpoints, a static list of
    URLs or a Kubernetes selector for the gateway's own pods (their `targetPort` = `port`)."""

    peers: Discovery
    port: Port = 9003
    host: str | None = None  # None: the gateway's own `host`
    replica_id: str | None = None  # None: $POD_NAME, else hostname:port (unique per replica)
    # the shared bearer token (same in every replica): this file, else this environment variable
    token_file: str | None = None
    token_env: str = "FLEETGATE_PEER_TOKEN"
    pull_interval_ms: Annotated[int, Meta(ge=10, le=10_000)] = 50
    # a peer not answering for this long leaves the ring: its pods are taken over
    peer_timeout_ms: Annotated[int, Meta(ge=50, le=60_000)] = 1000


class Scrape(_Base, kw_only=True):
    interval_ms: Annotated[int, Meta(ge=10, le=60_000)] = 100
    timeout_ms: Annotated[int, Meta(ge=10, le=60_000)] = 500
    stale_after_misses: Annotated[int, Meta(ge=1, le=100)] = 3
    max_staleness_ms: Annotated[int, Meta(ge=10)] = 1000
    # scrapes in flight at once: 1,000 pods at 100 ms with ~5 ms answers keep ~50 in flight
    max_concurrency: Annotated[int, Meta(ge=1, le=10_000)] = 256
    models_refresh_s: Annotated[float, Meta(gt=0)] = 5.0
    engine: Engine = "auto"
    # frozen metrics: this many scrapes in a row with a byte-identical /metrics body while the
    # gateway kept sending the pod requests mark it stale (0: off); see metrics/frozen.py
    frozen_after_scrapes: Annotated[int, Meta(ge=0, le=1000)] = 10
    # ask pods for only the samples routing reads (`/metrics?name[]=...`, honoured by vLLM and
    # SGLang; TGI answers its whole body, which is read as before); docs/scraping.md
    filter: bool = True
    # the latency histograms' sums and counts (read only for the capacity agent) this often
    slow_interval_ms: Annotated[int, Meta(ge=10, le=600_000)] = 1000
    # a pod quiet for this many scrapes in a row (no requests dispatched to it, sample unchanged)
    # is scraped every `idleIntervalMs` until a request is dispatched to it (0: never); the idle
    # interval is used within [intervalMs, maxStalenessMs / 2] so an idle pod stays fresh
    idle_after_scrapes: Annotated[int, Meta(ge=0, le=1000)] = 3
    idle_interval_ms: Annotated[int, Meta(ge=10, le=60_000)] = 500
    # CPU (cores) this gateway process spends on scrapes at most; over it the most overdue pods are
    # scraped first, round-robin (0: no limit)
    cpu_budget_cores: Annotated[float, Meta(ge=0, le=64)] = 0.5
    sharing: ScrapeSharing | None = None  # None: this replica scrapes every pod itself


class Saturation(_Base, kw_only=True):
    """A pod is saturated at or above either threshold (reference: queue 5, KV 0.8)."""

    queue_depth: Annotated[int, Meta(ge=1)] = 5
    kv_usage: Fraction = 0.8


class PluginConfig(_Base, kw_only=True):
    """One plugin instance. `type` is a built-in plugin or one a package registers in the
    `fleetgate.plugins` entry-point group; profiles refer to the instance by `name`."""

    type: str
    name: str | None = None  # unset: the type; two instances of one type need two names
    weight: NonNegFloat = 1.0  # a scorer's weight in profiles that list it under `plugins`
    params: dict[str, Any] = msgspec.field(default_factory=dict)  # the plugin's own settings


class Profile(_Base, kw_only=True):
    """A named weight set: plugin name → weight. Unknown names are rejected at startup.

    A name is a plugin from `scheduling.plugins`, else a built-in plugin type of that name."""

    weights: dict[str, NonNegFloat] = msgspec.field(default_factory=dict)
    saturation: Saturation = msgspec.field(default_factory=Saturation)
    filters: list[str] | None = None  # None: the default filter chain
    picker: str | None = None  # plugin name; None: the profile's default (max_score)
    sheddable: bool = False  # requests of this objective may be shed first under overload
    # more plugins by name: a filter joins the chain, a scorer adds its `weight`, a picker replaces `picker`
    plugins: list[str] = msgspec.field(default_factory=list)
    # scorers used instead of `weights` when no pod has fresh metrics; unset: the base's (inflight 1)
    degraded_weights: dict[str, NonNegFloat] | None = None


class PrefixCache(_Base, kw_only=True):
    """The approximate prefix index: block size, bounds per pod and in bytes over all pods.

    `maxBytes` is the index's memory budget (blocks x 300 bytes, measured 195-290 under churn, see
    docs/scale.md); past it the least recently used blocks go first, whichever pod holds them."""

    block_chars: Annotated[int, Meta(ge=4)] = 64  # 16 tokens x ~4 chars
    max_blocks_per_pod: Annotated[int, Meta(ge=1)] = 50_000
    max_prefix_blocks: Annotated[int, Meta(ge=1)] = 256
    max_bytes: Annotated[int, Meta(ge=1_048_576)] = 268_435_456  # 256 MiB


class TwoStage(_Base, kw_only=True):
    """Large pools: score a sample of the candidates instead of every pod (docs/scale.md).

    When more than `minPods` pods serve the requested model, a decision filters and scores `sample`
    of them drawn at random plus the pods the plugins nominate (the prompt's prefix holders and
    homes, the pods holding its LoRA adapter), so its cost stays flat as the pool grows. 0 = never."""

    min_pods: Annotated[int, Meta(ge=0)] = 256
    sample: Annotated[int, Meta(ge=2, le=4096)] = 32


class Scheduling(_Base, kw_only=True):
    default_profile: str = "latency"
    plugins: list[PluginConfig] = msgspec.field(default_factory=list)  # configured plugin instances
    profiles: dict[str, Profile] = msgspec.field(default_factory=dict)
    model_profiles: dict[str, str] = msgspec.field(default_factory=dict)
    prefix_cache: PrefixCache = msgspec.field(default_factory=PrefixCache)
    two_stage: TwoStage = msgspec.field(default_factory=TwoStage)


class Admission(_Base, kw_only=True):
    """Requests wait in the gateway when every pod is saturated, then are shed with 429."""

    queue_size: Annotated[int, Meta(ge=0)] = 1024
    queue_timeout_ms: Annotated[int, Meta(ge=0)] = 10_000


class OutlierDetection(_Base, kw_only=True):
    """Per-pod ejection on real request failures (Envoy's outlier detection, sized for GPU pools).

    Deviations from Envoy's defaults, and why: `maxEjectionPercent` 50 instead of 10 (inference
    pools are small — with 3 pods, 10% would never eject the second of two broken pods, and a pod
    erroring in 1 ms is worse than less capacity); the failure-percentage rule is on by default
    (threshold 50%, 20 requests per interval) instead of off. Ejection lasts `baseEjectionTimeS`
    times the number of times the pod was ejected in a row, up to `maxEjectionTimeS`; a pod whose
    ejection ended gets traffic again (its probe), and a success resets its count.
    """

    enabled: bool = True
    consecutive_5xx: Annotated[int, Meta(ge=1)] = 5
    consecutive_gateway_failures: Annotated[int, Meta(ge=1)] = 5  # connect errors, resets, timeouts
    interval_s: PositiveFloat = 10.0
    failure_percentage_threshold: Annotated[int, Meta(ge=1, le=100)] = 50
    failure_percentage_min_requests: Annotated[int, Meta(ge=1)] = 20
    base_ejection_time_s: PositiveFloat = 30.0
    max_ejection_time_s: PositiveFloat = 300.0
    max_ejection_percent: Annotated[int, Meta(ge=0, le=100)] = 50


class RetryBudget(_Base, kw_only=True):
    """Retries (next pod, before the first token) may not exceed `ratio` x requests + `minRetries`
    over `windowS`, so a sick pool is not hammered by its own retries."""

    ratio: Annotated[float, Meta(ge=0, le=10)] = 0.2
    min_retries: Annotated[int, Meta(ge=0)] = 10
    window_s: PositiveFloat = 10.0


class Proxy(_Base, kw_only=True):
    max_body_bytes: Annotated[int, Meta(ge=1024)] = 8 * 1024 * 1024
    max_json_depth: Annotated[int, Meta(ge=2, le=10_000)] = 64  # deeper request bodies get 400
    connect_timeout_s: PositiveFloat = 2.0
    # waiting for the pod's first body chunk (≈ the first token): past it the request moves to the
    # next pod; nothing had reached the client
    first_byte_timeout_s: PositiveFloat = 60.0
    read_timeout_s: PositiveFloat = 120.0  # the longest gap between two chunks once streaming
    max_attempts: Annotated[int, Meta(ge=1, le=10)] = 3
    max_connections: Annotated[int, Meta(ge=1)] = 4096  # per pod
    idle_connection_s: PositiveFloat = 4.0  # keep-alive reuse window (below uvicorn's 5 s on pods)
    debug_headers: bool = False  # add `x-fleetgate-pod` to responses (reveals pod names: off by default)
    outlier_detection: OutlierDetection = msgspec.field(default_factory=OutlierDetection)
    retry_budget: RetryBudget = msgspec.field(default_factory=RetryBudget)


Sha256Hex = Annotated[str, Meta(pattern="^[0-9a-f]{64}$")]


class CircuitBreakers(_Base, kw_only=True):
    """Envoy circuit-breaker thresholds for the picker and model-server clusters.

    Envoy's defaults (1,024 requests, 1,024 pending) are a cliff here: every request holds its
    ext_proc stream to the picker for its whole life, so the 1,025th concurrent stream got a bare
    500 (`upstream_rq_active_overflow`). Size them above the concurrency the pool can hold."""

    max_requests: Annotated[int, Meta(ge=1)] = 100_000
    max_pending_requests: Annotated[int, Meta(ge=1)] = 100_000
    max_connections: Annotated[int, Meta(ge=1)] = 100_000


class ExtProc(_Base, kw_only=True):
    enabled: bool = False
    port: Port = 9002
    fallback_endpoints: Annotated[int, Meta(ge=0, le=8)] = 2  # extra ip:port entries after the pick
    circuit_breakers: CircuitBreakers = msgspec.field(default_factory=CircuitBreakers)
    # Envoy sends the response headers to the picker (`response_header_mode: SEND`): their status
    # feeds outlier detection, and a stream closed before them counts as cancelled. false (the
    # default, and envoy_bootstrap()'s): the response phase is skipped, the stream's close releases
    # the pod's slot and counts as ok (one message pair fewer per request; docs/cluster-gateway.md).
    response_headers: bool = False
    # TLS on the ext_proc port (PEM files, set together): Envoy AI Gateway always connects to an
    # InferencePool's endpoint picker over TLS, as the reference picker serves by default.
    tls_cert_file: str | None = None
    tls_key_file: str | None = None
    # SHA-256 hex of the token Envoy presents (the bootstrap's `envoy_token`) on the ext_authz check
    # (`x-fleetgate-envoy-token` header) and its access-log calls (gRPC metadata): without it anyone
    # who reaches those ports could take pod slots for `extAuthz.slotTtlS` or forge log entries that
    # eject pods. Empty: accepted from any caller (checks still verify the client's `auth`).
    envoy_token_sha256: list[Sha256Hex] = msgspec.field(default_factory=list)


class GlobalRouterLink(_Base, kw_only=True):
    """Where this cluster's agent streams capacity reports (Tier 2)."""

    address: str  # host:port of the global router's gRPC CapacityService
    token_env: str = "FLEETGATE_AGENT_TOKEN"
    token_file: str | None = None
    report_interval_ms: Annotated[int, Meta(ge=50)] = 1000
    tls: bool = False
    ca_file: str | None = None


class ExtAuthz(_Base, kw_only=True):
    """Envoy's ext_authz HTTP filter as the endpoint picker (cluster_gateway/extauthz/).

    The check is served on the gateway's HTTP port under `/_fleetgate/pick`, by every serving
    process; the end of each request comes back through Envoy's gRPC access log on the
    `extProc.port` (which this turns on). `slotTtlS` bounds how long a pick whose end Envoy never
    logged (Envoy restarted, its log stream broke) holds the pod's in-flight slot; a longer request
    is then counted only through the pod's scraped running count (docs/envoy-picker.md)."""

    enabled: bool = False
    slot_ttl_s: Annotated[float, Meta(ge=1.0, le=3600.0)] = 120.0


class GatewayAuth(_Base, kw_only=True):
    """Who may send inference requests to this gateway (docs/security.md).

    `mode: hmac`: the global router signs each request with a per-cluster secret; the gateway needs
    the secret itself to verify (from `secretFile`, one secret per line while rotating, or
    `secretEnv`). `mode: bearer`: the router sends the secret as a token; the gateway keeps only
    its SHA-256 (`tokenSha256`). `apiKeySha256`: optional local API keys (`Authorization: Bearer`,
    same digest format as the router's `tenants[].apiKeySha256`) for direct single-cluster use.
    `mode: none` and no keys: the gateway is open (a bare single-cluster `fleetgate gateway`).
    `/health`, `/ready` and `/metrics` are always open (probes and Prometheus).
    """

    mode: Literal["none", "hmac", "bearer"] = "none"
    secret_file: str | None = None  # hmac
    secret_env: str | None = None  # hmac
    token_sha256: list[Sha256Hex] = msgspec.field(default_factory=list)  # bearer
    max_skew_s: Annotated[int, Meta(ge=1, le=600)] = 30  # hmac replay window (± seconds)
    replay_cache_size: Annotated[int, Meta(ge=1000)] = 200_000  # nonces remembered in the window
    api_key_sha256: list[Sha256Hex] = msgspec.field(default_factory=list)

    def __post_init__(self) -> None:
        if self.mode == "hmac" and self.secret_file is None and self.secret_env is None:
            raise ValueError("mode hmac needs `secretFile` or `secretEnv`")
        if self.mode == "bearer" and not self.token_sha256:
            raise ValueError("mode bearer needs `tokenSha256` (SHA-256 hex of the router's token)")

    @property
    def required(self) -> bool:
        return self.mode != "none" or bool(self.api_key_sha256)


class PodPerformance(_Base, kw_only=True):
    """What one pod sustains, for the agent's TTFT/headroom estimates before its pods have served
    anything (their own latency histograms and observed running cap win once they have)."""

    prefill_ms: PositiveFloat | None = None  # unloaded time to first token
    decode_tokens_per_second: PositiveFloat | None = None  # per running sequence
    max_running_requests: Annotated[int, Meta(ge=1)] | None = None  # the engine's max_num_seqs


class CapacityInfo(_Base, kw_only=True):
    cost_per_gpu_hour: NonNegFloat = 2.5
    capacity_type: Literal["on-demand", "spot"] = "on-demand"
    draining: bool = False
    gpus_per_pod: Annotated[int, Meta(ge=1)] = 1
    pod_performance: PodPerformance = msgspec.field(default_factory=PodPerformance)
    # what a pod measured (speed, running cap) ages toward podPerformance / the defaults once it
    # goes idle: kept whole for 2 minutes, then its weight halves every this many seconds
    measured_half_life_s: PositiveFloat = 1800.0


class GatewaySpec(_Base, kw_only=True):
    cluster_id: Annotated[str, Meta(min_length=1)] = "local"  # the router binds an agent token to it
    region: str = "local"
    zone: str = ""
    host: str = "127.0.0.1"
    port: Port = 8080
    public_url: str | None = None  # how Tier 2 reaches this gateway; default http://host:port
    discovery: Discovery
    scrape: Scrape = msgspec.field(default_factory=Scrape)
    scheduling: Scheduling = msgspec.field(default_factory=Scheduling)
    admission: Admission = msgspec.field(default_factory=Admission)
    proxy: Proxy = msgspec.field(default_factory=Proxy)
    ext_proc: ExtProc = msgspec.field(default_factory=ExtProc)
    ext_authz: ExtAuthz = msgspec.field(default_factory=ExtAuthz)
    global_router: GlobalRouterLink | None = None
    capacity: CapacityInfo = msgspec.field(default_factory=CapacityInfo)
    server: HttpServer = msgspec.field(default_factory=HttpServer)
    access_log: bool = True  # one JSON line per request on logger fleetgate.access (common/request_log.py)
    auth: GatewayAuth = msgspec.field(default_factory=GatewayAuth)


# The CRD whose `spec` is GatewaySpec (deploy/ renders it from this schema).
CRD_GROUP = "fleetgate.io"
CRD_VERSION = "v1alpha1"
CRD_KIND = "FleetgateGateway"
CRD_PLURAL = "fleetgategateways"
INFERENCE_POOL_GROUP = "inference.networking.k8s.io"
INFERENCE_POOL_VERSION = "v1"
INFERENCE_POOL_PLURAL = "inferencepools"
