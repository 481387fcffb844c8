"""Real clusters on loopback for router integration tests: SimFleet pods + ClusterGateway + its agent,
and global router replicas (optionally sharing a real redis-server)."""

from __future__ import annotations

import os
import re
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from cluster_gateway.gateway import ClusterGateway
from common.config.gateway import GatewaySpec
from common.config.loader import load_config_data
from common.config.router import GlobalRouterConfig
from global_router.router import GlobalRouter
from global_router.tenants import hash_key
from modelsim.fleet import PodSpec, SimFleet

MODEL = "meta-llama/Llama-3.1-8B-Instruct"
KEY = "sk-int-interactive"
BATCH_KEY = "sk-int-batch"
ADMIN_KEY = "sk-int-admin"
ADMIN_HEADERS = {"authorization": f"Bearer {ADMIN_KEY}"}


@dataclass
class SimCluster:
    cluster_id: str
    sims: SimFleet
    gateway: ClusterGateway

    async def kill(self) -> None:
        """The whole cluster goes away at once: pods refuse connections, the gateway stops."""
        for i in range(len(self.sims.pods)):
            self.sims.set_fault(i, "crash")
        await self.gateway.stop()

    async def stop(self) -> None:
        await self.gateway.stop()
        await self.sims.stop()


def agent_token(cluster_id: str) -> str:
    return f"agent-token-{cluster_id}"


def gateway_secret_env(cluster_id: str) -> str:
    """The env variable holding the cluster's router→gateway HMAC secret (set on first use)."""
    name = "FLEETGATE_TEST_GW_SECRET_" + re.sub(r"[^A-Za-z0-9]", "_", cluster_id).upper()
    os.environ.setdefault(name, f"gateway-secret-for-{cluster_id}-0123456789")
    return name


def agent_entry(cluster_id: str) -> dict[str, Any]:
    """A router's agent entry: token, pinned loopback gateway (explicitly allowed), HMAC credential."""
    return {
        "clusterId": cluster_id,
        "tokenSha256": hash_key(agent_token(cluster_id)),
        "gatewayHosts": ["127.0.0.1"],
        "allowLoopback": True,
        "gatewayAuth": {"mode": "hmac", "secretEnv": gateway_secret_env(cluster_id)},
    }


def router_config(
    clusters: list[str],
    *,
    redis_url: str | None = None,
    fail_mode: str = "open",
    tenants: list[dict[str, Any]] | None = None,
    stale_after_s: float = 1.5,
    **extra: Any,
) -> GlobalRouterConfig:
    data: dict[str, Any] = {
        "capacity": {
            "reportIntervalMs": 200,
            "staleAfterS": stale_after_s,
            "agents": [agent_entry(c) for c in clusters],
        },
        "tenants": [
            {"name": "web", "apiKeySha256": [hash_key(KEY)]},
            {"name": "nightly", "apiKeySha256": [hash_key(BATCH_KEY)], "trafficClass": "batch"},
            *(tenants or []),
        ],
        "failover": {"ejectAfterFailures": 2, "ejectBaseS": 5, "connectTimeoutS": 1.0},
        "adminKeySha256": hash_key(ADMIN_KEY),
    }
    if redis_url is not None:
        # explicit timeouts: on a loaded machine a healthy Redis call may exceed the 0.25 s floor
        data["redis"] = {
            "url": redis_url,
            "reportTtlS": 5,
            "failMode": fail_mode,
            "localShare": 0.5,
            "timeoutS": 3.0,
            "maxTimeoutS": 5.0,
        }
    data.update(extra)
    return load_config_data(data, GlobalRouterConfig)


async def start_router(cfg: GlobalRouterConfig) -> GlobalRouter:
    router = GlobalRouter(cfg, http_port=0, grpc_port=0)
    await router.start()
    return router


async def start_cluster(
    cluster_id: str,
    tmp: Path,
    router_grpc_port: int,
    *,
    region: str = "us",
    pods: int = 2,
    cost: float = 2.5,
    capacity_type: str = "on-demand",
    draining: bool = False,
    time_scale: float = 1.0,
) -> SimCluster:
    sims = SimFleet([PodSpec(profile="tiny", seed=i, time_scale=time_scale) for i in range(pods)])
    await sims.start()
    token_file = tmp / f"{cluster_id}.token"
    token_file.write_text(agent_token(cluster_id))
    spec = load_config_data(
        {
            "clusterId": cluster_id,
            "region": region,
            "discovery": {"static": {"endpoints": sims.urls}},
            "scrape": {"intervalMs": 50, "modelsRefreshS": 1},
            "globalRouter": {
                "address": f"127.0.0.1:{router_grpc_port}",
                "tokenFile": str(token_file),
                "reportIntervalMs": 200,
            },
            "capacity": {"costPerGpuHour": cost, "capacityType": capacity_type, "draining": draining},
            "auth": {"mode": "hmac", "secretEnv": gateway_secret_env(cluster_id)},
        },
        GatewaySpec,
    )
    gateway = ClusterGateway(spec, port=0)
    await gateway.start()
    return SimCluster(cluster_id, sims, gateway)


def fresh_ready(router: GlobalRouter, cluster_ids: list[str], min_pods: int = 1) -> Callable[[], bool]:
    """All named clusters reported fresh with `min_pods` ready pods serving MODEL, as this replica sees it."""

    def check() -> bool:
        now = time.time()
        seen = {
            c.cluster_id
            for c in router.fleet.snapshot()
            if router.selector.is_fresh(c, now)
            and (m := c.models.get(MODEL)) is not None
            and m.ready_pods >= min_pods
        }
        return set(cluster_ids) <= seen

    return check
