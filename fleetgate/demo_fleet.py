"""The demo's embedded fleet: three regions that differ in GPU, price and capacity type, and the
configs that wire them together (pod specs, gateway specs, the router config) with fresh secrets.

The plan is plain data so a newcomer can read the whole fleet in one screen. Every config built here
goes through the same loaders as a hand-written file, so the demo cannot drift from the schemas.
"""

from __future__ import annotations

import secrets
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from common.config.gateway import GatewaySpec
from common.config.loader import load_config_data
from common.config.router import GlobalRouterConfig
from global_router.tenants import hash_key
from modelsim.profiles import get_profile

BASE_MODEL = "meta-llama/Llama-3.1-8B-Instruct"
Engine = Literal["vllm", "sglang", "tgi"]


@dataclass(frozen=True)
class PodPlan:
    profile: str  # a modelsim hardware profile
    engine: Engine = "vllm"
    adapters: tuple[str, ...] = ()  # LoRA adapters the pod can load
    preload: tuple[str, ...] = ()  # resident at start
    max_lora: int = 2


@dataclass(frozen=True)
class ClusterPlan:
    cluster_id: str
    region: str
    gpu: str  # for people: what the profile stands for
    capacity_type: Literal["on-demand", "spot"]
    cost_per_gpu_hour: float
    pods: tuple[PodPlan, ...]


DEFAULT_FLEET: tuple[ClusterPlan, ...] = (
    ClusterPlan(
        "us-east-1",
        "us-east",
        "H100",
        "on-demand",
        4.00,
        (
            PodPlan("h100-llama3-8b", adapters=("sql-lora", "support-lora"), preload=("sql-lora",)),
            PodPlan("h100-llama3-8b", adapters=("sql-lora", "support-lora"), preload=("support-lora",)),
            PodPlan("h100-llama3-8b", max_lora=0),
        ),
    ),
    ClusterPlan(
        "eu-west-1",
        "eu-west",
        "A100",
        "spot",
        1.30,
        (
            PodPlan(
                "a100-llama3-8b", adapters=("sql-lora", "summarize-lora"), preload=("sql-lora",), max_lora=1
            ),
            PodPlan("a100-llama3-8b", adapters=("sql-lora", "summarize-lora"), max_lora=1),
            PodPlan("a100-llama3-8b", engine="sglang", max_lora=0),
        ),
    ),
    ClusterPlan(
        "ap-south-1",
        "ap-south",
        "L4",
        "on-demand",
        0.80,
        (
            PodPlan("l4-llama3-8b", adapters=("support-lora",), preload=("support-lora",), max_lora=1),
            PodPlan("l4-llama3-8b", engine="tgi", max_lora=0),
        ),
    ),
)

# One-way network latency between regions (ms): lets `x-fleetgate-client-region` pull traffic home.
REGION_LATENCY_MS: dict[str, dict[str, float]] = {
    "us-east": {"us-east": 0, "eu-west": 80, "ap-south": 210},
    "eu-west": {"us-east": 80, "eu-west": 0, "ap-south": 130},
    "ap-south": {"us-east": 210, "eu-west": 130, "ap-south": 0},
}


def adapters_of(fleet: tuple[ClusterPlan, ...]) -> list[str]:
    return sorted({a for c in fleet for p in c.pods for a in p.adapters})


@dataclass(frozen=True)
class DemoSecrets:
    """Fresh per run. The router config only ever sees their SHA-256 digests."""

    api_key: str  # tenant `interactive`
    batch_key: str  # tenant `batch`
    admin_key: str  # POST /admin/* on the router
    agent_tokens: dict[str, str] = field(repr=False)  # cluster id -> token (never printed)
    # cluster id -> the router's HMAC secret for that cluster's gateway (never printed)
    gateway_secrets: dict[str, str] = field(repr=False, default_factory=dict)

    @classmethod
    def generate(cls, cluster_ids: list[str]) -> DemoSecrets:
        return cls(
            api_key="sk-fg-" + secrets.token_urlsafe(24),
            batch_key="sk-fg-batch-" + secrets.token_urlsafe(24),
            admin_key="sk-fg-admin-" + secrets.token_urlsafe(24),
            agent_tokens={cid: secrets.token_urlsafe(32) for cid in cluster_ids},
            gateway_secrets={cid: secrets.token_urlsafe(32) for cid in cluster_ids},
        )

    def write_files(self, workdir: Path) -> None:
        """Each cluster's agent token and gateway secret as 0600 files (what Secrets would mount)."""
        for cid in self.agent_tokens:
            for path, value in (
                (token_path(workdir, cid), self.agent_tokens[cid]),
                (gateway_secret_path(workdir, cid), self.gateway_secrets[cid]),
            ):
                path.touch(mode=0o600)
                path.write_text(value + "\n")

    def __repr__(self) -> str:  # keys stay out of tracebacks and debug logs
        return "DemoSecrets(<redacted>)"


def token_path(workdir: Path, cluster_id: str) -> Path:
    return workdir / f"{cluster_id}.token"


def gateway_secret_path(workdir: Path, cluster_id: str) -> Path:
    """The router → gateway HMAC secret: read by the router (to sign) and the gateway (to verify)."""
    return workdir / f"{cluster_id}.gateway-secret"


def pod_spec_document(plan: ClusterPlan, *, time_scale: float, seed: int) -> dict[str, Any]:
    """The `fleetgate sim --pod-spec` document for one cluster's pods."""
    pods = []
    for i, p in enumerate(plan.pods):
        pods.append(
            {
                "profile": p.profile,
                "model": BASE_MODEL,
                "adapters": list(p.adapters),
                "preloadAdapters": list(p.preload),
                "maxLora": p.max_lora,
                "metricsFormat": p.engine,
                "seed": seed + i,
                "timeScale": time_scale,
            }
        )
    return {"pods": pods}


# a typical demo request: what the operator's own benchmark of the hardware would have used
TYPICAL_PROMPT_TOKENS = 600
TYPICAL_BATCH = 8


def pod_performance(plan: ClusterPlan, time_scale: float = 1.0) -> dict[str, float]:
    """`capacity.podPerformance` as an operator sets it from a benchmark of their hardware, so the
    router tells an L4 cluster from an H100 one before either has served a request. Taken from the
    slowest pod's simulator profile (scaled like the simulator), as a real operator would quote it."""
    profiles = [get_profile(p.profile) for p in plan.pods]
    prefill_s = max(hw.expected_ttft_s(TYPICAL_PROMPT_TOKENS) for hw in profiles)
    itl_s = max(hw.expected_itl_s(TYPICAL_BATCH, TYPICAL_PROMPT_TOKENS) for hw in profiles)
    return {
        "prefillMs": round(prefill_s * 1000.0 * time_scale, 1),
        "decodeTokensPerSecond": round(1.0 / (itl_s * time_scale), 1),
    }


def gateway_spec(
    plan: ClusterPlan,
    pod_urls: list[str],
    *,
    router_capacity_address: str,
    token_file: Path,
    gateway_secret_file: Path,
    time_scale: float = 1.0,
) -> GatewaySpec:
    """The cluster's gateway: its pods as a static pool, its agent linked to the router, and auth on
    (only requests the router signed with this cluster's secret are served)."""
    if len(pod_urls) != len(plan.pods):
        raise ValueError(f"{plan.cluster_id}: {len(pod_urls)} pod URLs for {len(plan.pods)} pods")
    endpoints = [
        {
            "url": url,
            "engine": p.engine,
            "labels": {"gpu": plan.gpu.lower(), "pod": f"{plan.cluster_id}/{i}"},
        }
        for i, (url, p) in enumerate(zip(pod_urls, plan.pods, strict=True))
    ]
    data = {
        "clusterId": plan.cluster_id,
        "region": plan.region,
        "zone": f"{plan.region}-a",
        "host": "127.0.0.1",
        "discovery": {"static": {"endpoints": endpoints}},
        "scrape": {"modelsRefreshS": 2},
        "globalRouter": {
            "address": router_capacity_address,
            "tokenFile": str(token_file),
            "reportIntervalMs": 500,
        },
        "capacity": {
            "costPerGpuHour": plan.cost_per_gpu_hour,
            "capacityType": plan.capacity_type,
            "podPerformance": pod_performance(plan, time_scale),
        },
        "auth": {"mode": "hmac", "secretFile": str(gateway_secret_file)},
    }
    return load_config_data(data, GatewaySpec, source=f"demo gateway {plan.cluster_id}")


def router_config(
    fleet: tuple[ClusterPlan, ...], keys: DemoSecrets, *, secret_dir: Path, redis_url: str | None = None
) -> GlobalRouterConfig:
    """One global router on loopback: two tenants (interactive, batch) and one agent per cluster,
    each pinned to a loopback gateway (allowed explicitly: this is a local demo) that the router
    signs its requests to with the cluster's own secret."""
    data: dict[str, Any] = {
        "host": "127.0.0.1",
        "region": "global",
        "capacity": {
            "host": "127.0.0.1",
            "reportIntervalMs": 500,
            "staleAfterS": 3.0,
            "agents": [
                {
                    "clusterId": c.cluster_id,
                    "tokenSha256": hash_key(keys.agent_tokens[c.cluster_id]),
                    "gatewayHosts": ["127.0.0.1"],
                    "allowLoopback": True,
                    "gatewayAuth": {
                        "mode": "hmac",
                        "secretFile": str(gateway_secret_path(secret_dir, c.cluster_id)),
                    },
                }
                for c in fleet
            ],
        },
        "tenants": [
            {
                "name": "interactive",
                "apiKeySha256": [hash_key(keys.api_key)],
                "requestsPerMinute": 1200,
                "tokensPerMinute": 600_000,
                "trafficClass": "interactive",
            },
            {
                "name": "batch",
                "apiKeySha256": [hash_key(keys.batch_key)],
                "maxConcurrency": 16,
                "trafficClass": "batch",
                "sheddable": True,
            },
        ],
        "adminKeySha256": hash_key(keys.admin_key),
        # the status page opens in a browser; without the admin key it shows no gateway URLs
        "publicStatus": True,
        "selection": {"regionLatencyMs": REGION_LATENCY_MS},
    }
    if redis_url is not None:
        data["redis"] = {"url": redis_url, "keyPrefix": "fleetgate-demo:"}
    return load_config_data(data, GlobalRouterConfig, source="demo router")
