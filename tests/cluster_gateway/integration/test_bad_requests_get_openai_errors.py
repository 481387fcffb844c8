"""Bad input through the gateway gets the right OpenAI error, and never reaches a pod."""

from __future__ import annotations

from .conftest import MODEL, chat, running, served_requests, tiny


async def test_bad_json_unknown_model_oversize_body_and_bad_fields() -> None:
    async with running([tiny()], proxy={"maxBodyBytes": 2048}) as (fleet, _gw, c):
        r = await c.post(
            "/v1/chat/completions", content=b'{"model": ', headers={"content-type": "application/json"}
        )
        assert r.status_code == 400
        assert r.json()["error"]["code"] == "invalid_json"
        assert r.json()["error"]["type"] == "invalid_request_error"

        r = await c.post("/v1/chat/completions", json=chat("hi") | {"model": "no-such-model"})
        assert r.status_code == 404
        assert r.json()["error"]["code"] == "model_not_found"
        assert r.json()["error"]["param"] == "model"

        r = await c.post("/v1/completions", json={"model": MODEL, "prompt": "x" * 4096})
        assert r.status_code == 413
        assert "error" in r.json()

        r = await c.post("/v1/chat/completions", json={"model": MODEL, "messages": []})
        assert r.status_code == 400 and r.json()["error"]["param"] == "messages"

        r = await c.post("/v1/completions", json={"model": MODEL, "prompt": "hi", "max_tokens": -3})
        assert r.status_code == 400 and r.json()["error"]["param"] == "max_tokens"

        r = await c.get("/v1/chat/completions")
        assert r.status_code == 405 and "error" in r.json()
        r = await c.post("/v1/embeddings", json={})
        assert r.status_code == 404 and "error" in r.json()

        assert served_requests(fleet, 0) == 0  # none of it reached the pod


async def test_models_health_ready_and_metrics() -> None:
    async with running([tiny(adapters=["sql-lora"]), tiny()]) as (_fleet, _gw, c):
        data = {m["id"]: m for m in (await c.get("/v1/models")).json()["data"]}
        assert sorted(data) == sorted({MODEL, "sql-lora"})
        assert data["sql-lora"]["parent"] == MODEL  # adapters keep vLLM's parent marker
        assert "parent" not in data[MODEL]
        assert (await c.get("/health")).status_code == 200
        ready = await c.get("/ready")
        assert ready.status_code == 200 and ready.json()["readyPods"] == 2
        assert (await c.post("/v1/chat/completions", json=chat("hello"))).status_code == 200
        text = (await c.get("/metrics")).text
        assert 'fleetgate_gateway_requests_total{outcome="ok"' in text
        assert "fleetgate_gateway_pick_seconds_bucket" in text
        assert "fleetgate_gateway_ttft_seconds_bucket" in text
        assert "fleetgate_gateway_stale_pods 0.0" in text
        assert "fleetgate_gateway_admission_queue_length 0.0" in text
        assert "fleetgate_gateway_inflight_requests" in text


async def test_responses_are_not_held_back_by_nagle() -> None:
    """The listener is TCP with TCP_NODELAY, so small responses are not delayed ~40 ms by Nagle."""
    import socket
    import statistics
    import time

    async with running([tiny()]) as (_fleet, gw, c):
        server = gw.data._server
        assert server is not None
        sock = server.servers[0].sockets[0]
        assert sock.proto == socket.IPPROTO_TCP
        assert sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY) == 1
        times = []
        for _ in range(15):
            t0 = time.perf_counter()
            assert (await c.get("/v1/models")).status_code == 200
            times.append(time.perf_counter() - t0)
        assert statistics.median(times) < 0.03, times  # Nagle + delayed ACK would be >= 40 ms
