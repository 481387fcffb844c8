"""Through the real gateway: prompts whose prefixes were warmed on pods behind the gateway's back
(another replica, a direct client) land where the simulator's KV events say the prefix is cached."""

from __future__ import annotations

import asyncio

import httpx

from cluster_gateway.gateway import ClusterGateway
from cluster_gateway.scheduling.precise.plugin import (
    ENDPOINT_ANNOTATION,
    REPLAY_ANNOTATION,
    PrecisePrefixScorer,
)
from modelsim.fleet import SimFleet
from modelsim.kv_events import KVEventsConfig
from tests.eventually import eventually

from .conftest import MODEL, gateway_spec, tiny, wait_ready


def _body(system: str, question: str) -> dict[str, object]:
    return {
        "model": MODEL,
        "messages": [{"role": "system", "content": system}, {"role": "user", "content": question}],
        "max_tokens": 2,
    }


async def test_requests_follow_prefixes_the_gateway_never_routed() -> None:
    events = KVEventsConfig(endpoint="tcp://127.0.0.1:0", replay_endpoint="tcp://127.0.0.1:0")
    async with SimFleet([tiny(kv_events=events, seed=i) for i in range(3)]) as fleet:
        endpoints: list[object] = []
        for pod in fleet.pods:
            assert pod.kv_events is not None and pod.kv_events.replay_endpoint is not None
            ann = {
                ENDPOINT_ANNOTATION: pod.kv_events.endpoint,
                REPLAY_ANNOTATION: pod.kv_events.replay_endpoint,
            }
            endpoints.append({"url": pod.url, "annotations": ann})
        spec = gateway_spec(
            [],
            discovery={"static": {"endpoints": endpoints}},
            scheduling={
                "defaultProfile": "precise",
                "profiles": {"precise": {"weights": {"precise_prefix": 3.0, "queue": 1.0, "inflight": 1.0}}},
            },
        )
        gw = ClusterGateway(spec, port=0, extproc_port=0)
        await gw.start()
        try:
            await wait_ready(gw, 3)
            systems = [f"You are assistant number {k} of the Fleetgate support desk. " * 10 for k in range(4)]
            homes = [k % 3 for k in range(1, 5)]  # where each system prompt gets warmed, directly
            for system, home in zip(systems, homes, strict=True):
                async with httpx.AsyncClient(base_url=fleet.pods[home].url, timeout=30) as direct:
                    r = await direct.post("/v1/chat/completions", json=_body(system, "warm-up"))
                    assert r.status_code == 200, r.text
            # the gateway's own first decision subscribes; then wait until it has heard every pod
            async with httpx.AsyncClient(base_url=gw.url, timeout=30) as c:
                r = await c.post("/v1/chat/completions", json=_body("unrelated", "hello"))
                assert r.status_code == 200, r.text
                scorer = gw.scheduler.plugin("precise_prefix")
                assert isinstance(scorer, PrecisePrefixScorer)
                await eventually(
                    lambda: len(scorer.caches) == 3 and all(c.blocks for c in scorer.caches.values()),
                    within=10,
                    what="every pod's warm-up reached the gateway as KV events (replayed from seq 0)",
                )
                for system, home in zip(systems, homes, strict=True):
                    r = await c.post("/v1/chat/completions", json=_body(system, "the real question"))
                    assert r.status_code == 200, r.text
                    assert r.headers["x-fleetgate-pod"] == fleet.pods[home].url, (system[:40], home)
                    await asyncio.sleep(0.06)  # a scrape between requests: affinity, not the burst guard
        finally:
            plugin = gw.scheduler.plugin("precise_prefix")
            await gw.stop()
            assert isinstance(plugin, PrecisePrefixScorer)
            await plugin.close()
