"""Through a real gateway: the pool learns each simulated pod's catalog from `/v1/models`, and adapter
requests reach only pods that list the adapter although none has it resident when they start."""

from __future__ import annotations

import collections

from .conftest import MODEL, chat, running, served_requests, tiny


async def test_adapter_requests_land_only_on_pods_listing_the_adapter() -> None:
    specs = [
        tiny(adapters=["sql-lora"], max_lora=2),
        tiny(adapters=["sql-lora", "chat-lora"], max_lora=2),
        tiny(adapters=["chat-lora"], max_lora=2),
        tiny(),
    ]
    async with running(specs) as (fleet, gw, client):
        cat = gw.pool.catalog
        assert cat.exact and cat.base_models() == {MODEL} and cat.adapters() == {"sql-lora", "chat-lora"}
        listing = {p.name for p in gw.pool.pods() if "sql-lora" in p.adapters}
        assert len(listing) == 2

        seen: collections.Counter[str] = collections.Counter()
        for n in range(12):
            r = await client.post("/v1/chat/completions", json=chat(f"q{n}", model="sql-lora"))
            assert r.status_code == 200, r.text
            seen[r.headers["x-fleetgate-pod"]] += 1
        assert set(seen) <= listing
        assert served_requests(fleet, 2) == served_requests(fleet, 3) == 0  # the pods' own counters

        r = await client.post("/v1/chat/completions", json=chat("hi", model="no-such-lora"))
        assert r.status_code == 404 and r.json()["error"]["code"] == "model_not_found"
