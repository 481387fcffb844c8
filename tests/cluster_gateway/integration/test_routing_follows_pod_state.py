"""Routing follows live pod state: load, LoRA residency and prefix-cache affinity."""

from __future__ import annotations

import asyncio
import collections

import httpx

from cluster_gateway.gateway import ClusterGateway
from tests.eventually import eventually

from .conftest import MODEL, chat, running, tiny


async def pod_of(c: httpx.AsyncClient, body: dict[str, object]) -> str:
    r = await c.post("/v1/chat/completions", json=body)
    assert r.status_code == 200, r.text
    return r.headers["x-fleetgate-pod"]


async def flood(
    url: str, n: int, *, max_tokens: int = 64, chars: int = 1200
) -> list[asyncio.Task[httpx.Response]]:
    """Load one pod directly (not through the gateway): deep queue, full KV cache."""
    client = httpx.AsyncClient(base_url=url, timeout=60)
    body = {"model": MODEL, "prompt": "z" * chars, "max_tokens": max_tokens}
    tasks = [asyncio.create_task(client.post("/v1/completions", json=body)) for _ in range(n)]
    done = asyncio.gather(*tasks, return_exceptions=True)
    done.add_done_callback(lambda _f: asyncio.ensure_future(client.aclose()))
    return tasks


async def wait_for_load(gw: ClusterGateway, name: str, within_s: float = 5.0) -> None:
    def queued() -> bool:
        pod = gw.pool.get(name)
        return pod is not None and pod.metrics is not None and pod.metrics.waiting >= 3

    await eventually(queued, within=within_s, what=f"pod {name} shows a queue")


async def test_a_pod_with_a_deep_queue_and_full_kv_cache_gets_fewer_requests() -> None:
    async with running([tiny(time_scale=4.0), tiny(time_scale=4.0), tiny(time_scale=4.0)]) as (fleet, gw, c):
        hot = fleet.urls[0]
        load = await flood(hot, 16)
        await wait_for_load(gw, hot)
        counts = collections.Counter([await pod_of(c, chat(f"q{i}", max_tokens=2)) for i in range(12)])
        assert counts[hot] <= 1, counts
        assert sum(counts.values()) == 12
        for t in load:
            t.cancel()


async def test_adapter_requests_go_to_the_pod_with_the_adapter_resident() -> None:
    adapters = ["sql-lora", "chat-lora"]
    specs = [
        tiny(adapters=adapters, max_lora=1, time_scale=4.0),  # its one slot busy with chat-lora
        tiny(adapters=adapters, max_lora=1, time_scale=4.0),  # sql-lora resident and running
        tiny(time_scale=4.0),  # base model only
    ]
    async with running(specs) as (fleet, gw, c), httpx.AsyncClient(timeout=60) as direct:
        busy = [
            asyncio.create_task(
                direct.post(
                    f"{fleet.urls[i]}/v1/completions",
                    json={"model": name, "prompt": "a", "max_tokens": 64},
                )
            )
            for i, name in ((0, "chat-lora"), (1, "sql-lora"))
        ]
        for _ in range(250):  # until a scrape shows both adapters running
            p0, p1 = gw.pool.get(fleet.urls[0]), gw.pool.get(fleet.urls[1])
            if (
                p0
                and p0.metrics
                and "chat-lora" in p0.metrics.running_adapters
                and p1
                and p1.metrics
                and "sql-lora" in p1.metrics.running_adapters
            ):
                break
            await asyncio.sleep(0.02)
        else:
            raise AssertionError("adapters never showed up as running")
        sql = {"model": "sql-lora", "messages": [{"role": "user", "content": "rows?"}], "max_tokens": 2}
        counts = collections.Counter([await pod_of(c, sql) for _ in range(6)])
        assert counts == {fleet.urls[1]: 6}, counts  # resident beats "must evict"; pod 2 cannot serve it
        for t in busy:
            t.cancel()


async def test_a_shared_system_prompt_sticks_to_the_pod_holding_its_prefix() -> None:
    system = "You are a meticulous assistant for the Fleetgate project. " * 16  # ~900 chars, 14 blocks
    async with running([tiny(), tiny(), tiny()]) as (_fleet, _gw, c):
        pods = []
        for i in range(10):
            body = {
                "model": MODEL,
                "messages": [
                    {"role": "system", "content": system},
                    {"role": "user", "content": f"question {i}"},
                ],
                "max_tokens": 2,
            }
            pods.append(await pod_of(c, body))
            # Moderate rate (a scrape between requests): this is about affinity, not the burst guard
            # that deliberately spreads back-to-back requests before the next scrape confirms them.
            await asyncio.sleep(0.12)
        first = pods[0]
        assert pods.count(first) >= 9, pods  # chance alone would give ~3 of 10
        # A different prompt is free to go elsewhere: affinity is per prefix, not a sticky pod.
        others = {await pod_of(c, chat(f"unrelated {i} " * 40, max_tokens=2)) for i in range(6)}
        assert len(others) >= 2, others
