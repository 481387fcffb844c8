"""`GET /v1/models` through the router: adapters keep `parent`, and the listing does not change
between requests while the fleet serves the same models (it used to carry the last report's time)."""

from __future__ import annotations

from global_router.model_listing import model_entries
from tests.global_router.fleet_fixtures import MODEL, cluster
from tests.global_router.router_harness import harness


async def test_adapters_list_their_parent_and_the_listing_is_stable_across_reports() -> None:
    async with harness(["a", "b"]) as h:
        await h.publish("a", model="m1", age_s=2.5)  # reports 2.5 s older than the next ones
        await h.publish("b", adapters=frozenset({"sql-lora"}), seq=1, age_s=2.5)
        first = await h.client.get("/v1/models", headers=h.headers())
        await h.publish("b", adapters=frozenset({"sql-lora"}), seq=2)  # newer reports, 2.5 s later
        await h.publish("a", model="m1", seq=2)
        second = await h.client.get("/v1/models", headers=h.headers())
        assert first.status_code == second.status_code == 200
        assert first.content == second.content
        by_id = {m["id"]: m for m in second.json()["data"]}
        assert by_id["sql-lora"]["parent"] == by_id["sql-lora"]["root"] == MODEL
        assert "parent" not in by_id[MODEL] and "parent" not in by_id["m1"]
        assert {m["created"] for m in by_id.values()} == {0}
        one = await h.client.get("/v1/models/sql-lora", headers=h.headers())
        assert one.json() == by_id["sql-lora"]


def test_a_name_that_is_a_base_model_somewhere_is_listed_as_a_base_model() -> None:
    entries = model_entries([cluster("a", model="m1", adapters=frozenset({"m2"})), cluster("b", model="m2")])
    assert entries["m2"] == {"id": "m2", "object": "model", "created": 0, "owned_by": "fleetgate"}
    assert list(entries) == ["m1", "m2"]
