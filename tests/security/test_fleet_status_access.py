"""`/fleet` and `/` show internal gateway URLs: private by default, URL-free when made public."""

from __future__ import annotations

from global_router.tenants import hash_key
from tests.global_router.router_harness import ADMIN_KEY, KEY, harness, router_config

STATUS_KEY = "sk-status-readonly"


async def test_fleet_and_status_page_need_a_key_by_default() -> None:
    async with harness(["a"], router_config(statusKeySha256=[hash_key(STATUS_KEY)])) as h:
        await h.publish("a")
        for path in ("/fleet", "/"):
            r = await h.client.get(path)
            assert r.status_code == 401 and r.json()["error"]["code"] == "invalid_api_key", path
            assert (await h.client.get(path, headers=h.headers(KEY))).status_code == 401  # a tenant key
            assert (await h.client.get(path, headers=h.headers(STATUS_KEY))).status_code == 200
            assert (await h.client.get(path, headers=h.headers(ADMIN_KEY))).status_code == 200
        doc = (await h.client.get("/fleet", headers=h.headers(STATUS_KEY))).json()
        assert doc["clusters"][0]["gateway_url"] == h.gateways["a"].url
        # the read-only key is not an admin key
        drain = await h.client.post("/admin/clusters/a/drain", headers=h.headers(STATUS_KEY))
        assert drain.status_code == 401
        assert (await h.client.get("/health")).status_code == 200
        assert (await h.client.get("/metrics")).status_code == 200


async def test_without_any_status_or_admin_key_the_status_is_403() -> None:
    async with harness(["a"], router_config(adminKeySha256=None)) as h:
        r = await h.client.get("/fleet")
        assert r.status_code == 403 and "statusKeySha256" in r.json()["error"]["message"]


async def test_public_status_shows_no_internal_urls() -> None:
    async with harness(["a"], router_config(publicStatus=True)) as h:
        await h.publish("a")
        doc = (await h.client.get("/fleet")).json()
        assert doc["clusters"][0]["id"] == "a" and "gateway_url" not in doc["clusters"][0]
        page = await h.client.get("/")
        assert page.status_code == 200 and h.gateways["a"].url not in page.text
        assert h.gateways["a"].url not in (await h.client.get("/fleet")).text
        full = (await h.client.get("/fleet", headers=h.headers(ADMIN_KEY))).json()
        assert full["clusters"][0]["gateway_url"] == h.gateways["a"].url
