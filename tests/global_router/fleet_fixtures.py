"""Hand-built cluster states for selection and app tests."""

from __future__ import annotations

import time

from global_router.fleet_view import ClusterState, ModelCapacity

MODEL = "meta-llama/Llama-3.1-8B-Instruct"


def cluster(
    cid: str,
    *,
    region: str = "us",
    headroom: int = 10,
    queued: int = 0,
    ttft_ms: float = 200.0,
    cost: float = 2.5,
    capacity_type: str = "on-demand",
    seq: int = 1,
    age_s: float = 0.0,
    draining: bool = False,
    router_drain: bool = False,
    model: str = MODEL,
    adapters: frozenset[str] = frozenset(),
    ready_pods: int = 2,
    url: str = "http://127.0.0.1:9",
    gpu_tokens_per_s: float = 0.0,
) -> ClusterState:
    cap = ModelCapacity(
        model=model,
        ready_pods=ready_pods,
        saturated_pods=0,
        queued=queued,
        running=1,
        kv_headroom=0.5,
        adapters=adapters,
        est_ttft_ms=ttft_ms,
        tokens_per_s=1000.0,
        headroom_requests=headroom,
        gpu_tokens_per_s=gpu_tokens_per_s,
    )
    return ClusterState(
        cluster_id=cid,
        region=region,
        zone=f"{region}-a",
        gateway_url=url,
        seq=seq,
        received_at=time.time() - age_s,
        models={model: cap},
        cost_per_gpu_hour=cost,
        gpus=ready_pods,
        capacity_type=capacity_type,
        draining=draining,
        router_drain=router_drain,
    )
