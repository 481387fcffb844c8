"""The global endpoint over real loopback HTTP: auth, errors, headers, failover, streaming, admin."""

from __future__ import annotations

import msgspec

from tests.global_router.fleet_fixtures import MODEL
from tests.global_router.router_harness import ADMIN_KEY, BATCH_KEY, harness, router_config

CHAT = {"model": MODEL, "messages": [{"role": "user", "content": "hello there"}], "max_tokens": 5}


def _err(resp) -> dict:  # type: ignore[no-untyped-def]
    body = resp.json()
    assert set(body["error"]) == {"message", "type", "param", "code"}
    return body["error"]


async def test_missing_or_wrong_key_is_401() -> None:
    async with harness(["a"]) as h:
        await h.publish("a")
        r = await h.client.post("/v1/chat/completions", json=CHAT)
        assert r.status_code == 401 and _err(r)["code"] == "invalid_api_key"
        r = await h.client.post("/v1/chat/completions", json=CHAT, headers=h.headers("sk-nope"))
        assert r.status_code == 401
        r = await h.client.get("/v1/models")
        assert r.status_code == 401


async def test_chat_is_forwarded_with_router_headers_only() -> None:
    async with harness(["a"]) as h:
        await h.publish("a")
        client_headers = h.headers(
            **{
                "x-fleetgate-profile": "evil",
                "x-fleetgate-cluster": "b",
                "x-gateway-destination-endpoint": "10.0.0.1:8000",
                "x-gateway-inference-objective": "vip",
                "x-fleetgate-client-region": "us",
                "traceparent": "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01",
            }
        )
        r = await h.client.post("/v1/chat/completions", json=CHAT, headers=client_headers)
        assert r.status_code == 200, r.text
        assert r.json()["choices"][0]["message"]["content"] == "from a"
        assert r.headers["x-fleetgate-cluster"] == "a"
        assert r.headers["x-ratelimit-limit-requests"] == "1000"
        assert r.headers["x-ratelimit-remaining-requests"] == "999"
        seen = h.gateways["a"].requests[-1]
        assert seen["x-fleetgate-profile"] == "latency"  # from the tenant's class, not the client
        assert "x-gateway-destination-endpoint" not in seen
        assert "x-gateway-inference-objective" not in seen
        assert "x-fleetgate-cluster" not in seen and "x-fleetgate-client-region" not in seen
        assert "authorization" not in seen  # the tenant's key stays at the router
        assert seen["x-gateway-inference-fairness-id"] == "acme"
        assert seen["traceparent"].split("-")[1] == "0af7651916cd43dd8448eb211c80319c"


async def test_batch_tenant_gets_throughput_profile_and_sheddable_flag() -> None:
    async with harness(["a"]) as h:
        await h.publish("a")
        r = await h.client.post("/v1/chat/completions", json=CHAT, headers=h.headers(BATCH_KEY))
        assert r.status_code == 200
        seen = h.gateways["a"].requests[-1]
        assert seen["x-fleetgate-profile"] == "throughput" and seen["x-fleetgate-sheddable"] == "true"


async def test_bad_requests_get_openai_errors() -> None:
    async with harness(["a"]) as h:
        await h.publish("a")
        h.router.selector.start_warmup(0.0)  # past start-up: an unknown model is a 404, not a 503
        hd = h.headers()
        r = await h.client.post("/v1/chat/completions", content=b"{not json", headers=hd)
        assert r.status_code == 400 and _err(r)["code"] == "invalid_json"
        r = await h.client.post("/v1/chat/completions", json={**CHAT, "model": "nope"}, headers=hd)
        assert r.status_code == 404 and _err(r)["code"] == "model_not_found"
        big = {**CHAT, "messages": [{"role": "user", "content": "x" * 10_000}]}
        r = await h.client.post("/v1/chat/completions", json=big, headers=hd)
        assert r.status_code == 413 and _err(r)["code"] == "request_too_large"
        r = await h.client.post("/v1/chat/completions", json=CHAT, headers=h.headers("sk-m1"))
        assert r.status_code == 403 and _err(r)["code"] == "model_not_allowed"
        r = await h.client.get("/v1/chat/completions", headers=hd)
        assert r.status_code == 405 and "error" in r.json()  # JSON from the handler, not Litestar's
        r = await h.client.get("/nope")
        assert r.status_code == 404 and "error" in r.json()


async def test_failover_on_5xx_and_refused_then_ejection() -> None:
    async with harness(["bad", "good"]) as h:
        await h.publish("bad", headroom=50)  # ranked first (on TTFT: room past ampleHeadroom counts alike)
        await h.publish("good", headroom=5, ttft_ms=600)
        await h.publish("dead", headroom=40, ttft_ms=400, url="http://127.0.0.1:1")  # connection refused
        h.gateways["bad"].mode = "error500"
        for _ in range(3):
            r = await h.client.post("/v1/chat/completions", json=CHAT, headers=h.headers())
            assert r.status_code == 200 and r.headers["x-fleetgate-cluster"] == "good"
        fleet = (await h.client.get("/fleet", headers=h.headers(ADMIN_KEY))).json()
        by_id = {c["id"]: c for c in fleet["clusters"]}
        assert by_id["bad"]["ejected_for_s"] > 0 and by_id["dead"]["ejected_for_s"] > 0
        calls = len(h.gateways["bad"].requests)
        r = await h.client.post("/v1/chat/completions", json=CHAT, headers=h.headers())
        assert r.headers["x-fleetgate-cluster"] == "good"
        assert len(h.gateways["bad"].requests) == calls  # ejected: not even tried
        metrics = (await h.client.get("/metrics")).text
        assert "fleetgate_router_failovers_total" in metrics
        assert 'fleetgate_router_ejections_total{cluster="bad"}' in metrics


async def test_429_from_every_cluster_is_passed_through() -> None:
    async with harness(["a", "b"]) as h:
        await h.publish("a")
        await h.publish("b")
        h.gateways["a"].mode = h.gateways["b"].mode = "error429"
        r = await h.client.post("/v1/chat/completions", json=CHAT, headers=h.headers())
        assert r.status_code == 429
        assert len(h.gateways["a"].requests) == len(h.gateways["b"].requests) == 1


async def test_streaming_passes_chunks_and_broken_stream_ends_with_sse_error() -> None:
    async with harness(["a"]) as h:
        await h.publish("a")
        body = {**CHAT, "stream": True}
        async with h.client.stream("POST", "/v1/chat/completions", json=body, headers=h.headers()) as r:
            assert r.status_code == 200
            text = "".join([c async for c in r.aiter_text()])
        assert text.count("data: ") == 6 and text.rstrip().endswith("data: [DONE]")
        h.gateways["a"].mode = "break_stream"
        async with h.client.stream("POST", "/v1/chat/completions", json=body, headers=h.headers()) as r:
            text = "".join([c async for c in r.aiter_text()])
        events = [e[len("data: ") :] for e in text.strip().split("\n\n")]
        assert events[-1] == "data: [DONE]"[len("data: ") :]
        err = msgspec.json.decode(events[-2])["error"]
        assert err["code"] == "upstream_stream_error" and "incomplete" in err["message"]


async def test_models_fleet_status_and_health() -> None:
    async with harness(["a", "b"]) as h:
        await h.publish("a", model="m1")
        await h.publish("b", adapters=frozenset({"sql-lora"}))
        await h.publish("old", model="m-stale", age_s=60)  # stale, not forgotten: still served
        r = await h.client.get("/v1/models", headers=h.headers())
        ids = [m["id"] for m in r.json()["data"]]
        assert r.json()["object"] == "list" and ids == sorted([MODEL, "m1", "sql-lora", "m-stale"])
        r = await h.client.get("/v1/models", headers=h.headers("sk-m1"))
        assert [m["id"] for m in r.json()["data"]] == ["m1"]
        r = await h.client.get(f"/v1/models/{MODEL}", headers=h.headers())  # ids contain slashes
        assert r.status_code == 200 and r.json()["id"] == MODEL
        r = await h.client.get("/v1/models/m-gone", headers=h.headers())
        assert r.status_code == 404 and r.json()["error"]["code"] == "model_not_found"
        fleet = (await h.client.get("/fleet", headers=h.headers(ADMIN_KEY))).json()
        assert {c["id"]: c["fresh"] for c in fleet["clusters"]} == {"a": True, "b": True, "old": False}
        assert {c["id"]: c["stale"] for c in fleet["clusters"]} == {"a": False, "b": False, "old": True}
        metrics = (await h.client.get("/metrics")).text
        assert 'fleetgate_router_cluster_stale{cluster="old"} 1.0' in metrics
        assert "fleetgate_router_stale_clusters 1.0" in metrics
        assert fleet["router"]["rate_limiter"] == "local"
        assert set(fleet["regions"]) == {"us"}
        page = await h.client.get("/", headers=h.headers(ADMIN_KEY))
        assert (
            page.status_code == 200 and 'http-equiv="refresh"' in page.text and "sql-lora" in page.text
        )  # adapters are listed
        assert ">a<" in page.text and "stale" in page.text
        assert (await h.client.get("/health")).json()["status"] == "ok"


async def test_admin_drain_needs_the_admin_key_and_stops_new_work() -> None:
    async with harness(["a", "b"]) as h:
        await h.publish("a", headroom=50)
        await h.publish("b", headroom=5, ttft_ms=600)
        r = await h.client.post("/admin/clusters/a/drain", headers=h.headers())
        assert r.status_code == 401
        r = await h.client.post("/admin/clusters/a/drain", headers=h.headers(ADMIN_KEY))
        assert r.status_code == 200 and r.json()["router_drain"] is True
        for _ in range(5):
            r = await h.client.post("/v1/chat/completions", json=CHAT, headers=h.headers())
            assert r.headers["x-fleetgate-cluster"] == "b"
        assert not h.gateways["a"].requests
        r = await h.client.post(
            "/admin/clusters/a/drain", json={"drain": False}, headers=h.headers(ADMIN_KEY)
        )
        assert r.json()["router_drain"] is False


async def test_tenant_over_rpm_gets_429_with_headers() -> None:
    async with harness(["a"]) as h:
        await h.publish("a")
        hd = h.headers("sk-limited")
        for _ in range(2):
            assert (await h.client.post("/v1/chat/completions", json=CHAT, headers=hd)).status_code == 200
        r = await h.client.post("/v1/chat/completions", json=CHAT, headers=hd)
        assert r.status_code == 429 and _err(r)["code"] == "rate_limit_exceeded"
        assert r.headers["x-ratelimit-limit-requests"] == "2"
        assert r.headers["x-ratelimit-remaining-requests"] == "0"
        assert int(r.headers["retry-after"]) >= 1
        assert r.headers["x-ratelimit-reset-requests"].endswith("s")


async def test_tokens_reconciled_with_real_usage() -> None:
    async with harness(["a"]) as h:
        await h.publish("a")
        hd = h.headers("sk-limited")
        body = {**CHAT, "max_tokens": 400}  # reserves ~405, really uses 12
        r = await h.client.post("/v1/chat/completions", json=body, headers=hd)
        assert r.status_code == 200
        assert int(r.headers["x-ratelimit-remaining-tokens"]) < 100
        r = await h.client.post("/v1/chat/completions", json={**CHAT, "max_tokens": 5}, headers=hd)
        # the first request's reservation was settled at its real usage (12), not 400+
        assert r.status_code == 200
        assert int(r.headers["x-ratelimit-remaining-tokens"]) >= 500 - 12 - 12 - 2


async def test_gateway_404_from_stale_catalogue_fails_over_and_counts() -> None:
    async with harness(["stale", "fresh"]) as h:
        await h.publish("stale", headroom=50)
        await h.publish("fresh", headroom=5, ttft_ms=600)
        h.gateways["stale"].mode = "error404"
        r = await h.client.post("/v1/chat/completions", json=CHAT, headers=h.headers())
        assert r.status_code == 200 and r.headers["x-fleetgate-cluster"] == "fresh"
        assert h.router.health.snapshot("stale")["consecutive_failures"] == 1


async def test_gateway_401_and_403_are_cluster_failures_that_eject() -> None:
    for status in (401, 403):
        async with harness(["broken", "ok"]) as h:
            await h.publish("broken", headroom=50)
            await h.publish("ok", headroom=5, ttft_ms=600)
            h.gateways["broken"].mode = f"error{status}"
            for _ in range(2):  # ejectAfterFailures: 2
                r = await h.client.post("/v1/chat/completions", json=CHAT, headers=h.headers())
                assert r.status_code == 200 and r.headers["x-fleetgate-cluster"] == "ok"
            assert h.router.health.is_ejected("broken"), status


async def test_client_errors_from_the_model_server_are_not_cluster_failures() -> None:
    for status in (400, 422):
        async with harness(["a", "b"]) as h:
            await h.publish("a", headroom=50)
            await h.publish("b", headroom=5, ttft_ms=600)
            h.gateways["a"].mode = f"error{status}"
            for _ in range(3):
                r = await h.client.post("/v1/chat/completions", json=CHAT, headers=h.headers())
                assert r.status_code == status and r.headers["x-fleetgate-cluster"] == "a"
            assert not h.gateways["b"].requests  # not retried elsewhere
            assert h.router.health.snapshot("a")["consecutive_failures"] == 0


async def test_stale_reports_keep_serving_until_requests_fail() -> None:
    async with harness(["a", "b"]) as h:
        # every agent silent for 20 s (staleAfterS 3): both stale, headroom aged to 3/20 of it
        await h.publish("a", age_s=20, headroom=200)  # 30 left: a ranks first until it fails
        await h.publish("b", age_s=20, headroom=20)
        for _ in range(4):
            r = await h.client.post("/v1/chat/completions", json=CHAT, headers=h.headers())
            assert r.status_code == 200
        h.gateways["a"].mode = "error500"  # now a really fails: ejected, b takes everything
        for _ in range(2):  # ejectAfterFailures: 2, each failed over to b within the request
            r = await h.client.post("/v1/chat/completions", json=CHAT, headers=h.headers())
            assert r.status_code == 200 and r.headers["x-fleetgate-cluster"] == "b"
        assert h.router.health.is_ejected("a")
        r = await h.client.post("/v1/chat/completions", json=CHAT, headers=h.headers())
        assert r.headers["x-fleetgate-cluster"] == "b"


async def test_start_up_is_503_with_retry_after_and_ready_follows_the_fleet() -> None:
    async with harness(["a"]) as h:
        r = await h.client.post("/v1/chat/completions", json=CHAT, headers=h.headers())
        assert r.status_code == 503 and _err(r)["code"] == "fleet_warming_up"
        assert r.headers["retry-after"] == "1"
        r = await h.client.get("/ready")
        assert r.status_code == 503 and _err(r)["code"] == "router_not_ready"
        assert (await h.client.get("/health")).status_code == 200  # alive, just not ready
        await h.publish("a")
        r = await h.client.get("/ready")
        assert r.status_code == 200 and r.json() == {"ready": True, "routable_clusters": 1}
        r = await h.client.post("/v1/chat/completions", json=CHAT, headers=h.headers())
        assert r.status_code == 200


async def test_private_status_needs_the_admin_key() -> None:
    async with harness(["a"], router_config()) as h:  # private is the default
        await h.publish("a")
        assert (await h.client.get("/fleet")).status_code == 401
        assert (await h.client.get("/", headers=h.headers())).status_code == 401
        r = await h.client.get("/fleet", headers=h.headers(ADMIN_KEY))
        assert r.status_code == 200 and r.json()["clusters"][0]["id"] == "a"
        assert (await h.client.get("/health")).status_code == 200


async def test_draining_an_unknown_cluster_is_a_404_and_drains_can_be_listed() -> None:
    async with harness(["a", "b"]) as h:
        await h.publish("a")
        await h.publish("b", draining=True)  # the cluster asked to leave rotation itself
        admin = h.headers(ADMIN_KEY)
        r = await h.client.post("/admin/clusters/a-typo/drain", headers=admin)
        assert r.status_code == 404
        assert r.json()["error"]["code"] == "cluster_not_found" and "a-typo" in r.json()["error"]["message"]
        assert (await h.client.get("/admin/drains", headers=h.headers())).status_code == 401
        assert (await h.client.post("/admin/clusters/a/drain", headers=admin)).status_code == 200
        listed = (await h.client.get("/admin/drains", headers=admin)).json()
        assert listed["data"] == [
            {"cluster_id": "a", "by": "operator", "reported": True},
            {"cluster_id": "b", "by": "cluster", "reported": True},
        ]
        # an operator drain outlives the cluster's report, and can still be lifted
        h.fleet._cache.states.pop("a")
        r = await h.client.post("/admin/clusters/a/drain", json={"drain": False}, headers=admin)
        assert r.status_code == 200 and r.json()["router_drain"] is False
        listed = (await h.client.get("/admin/drains", headers=admin)).json()
        assert [d["cluster_id"] for d in listed["data"]] == ["b"]
        r = await h.client.post("/admin/clusters/a/drain", headers=admin)  # gone and not drained: unknown
        assert r.status_code == 404
