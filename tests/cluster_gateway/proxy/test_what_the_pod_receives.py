"""What crosses the proxy toward the pod: the client's request minus internal and hop-by-hop headers,
plus a `traceparent` whose parent is the gateway's forward span. The pod here is a tiny capturing
server (vLLM-shaped /metrics and /v1/models) so the test can see the raw request."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator

import httpx
import pytest
import uvicorn

from cluster_gateway.gateway import ClusterGateway
from common.config.gateway import GatewaySpec
from common.config.loader import load_config_data
from common.http import Receive, Scope, Send
from common.telemetry import setup_tracing, spans_exported
from tests.asgi_fakes import read_request_body
from tests.eventually import eventually

MODEL = "m-1"
METRICS = (
    f'vllm:num_requests_waiting{{model_name="{MODEL}"}} 0\n'
    f'vllm:num_requests_running{{model_name="{MODEL}"}} 0\n'
    f'vllm:kv_cache_usage_perc{{model_name="{MODEL}"}} 0.1\n'
).encode()


class CapturingPod:
    def __init__(self) -> None:
        self.requests: list[tuple[str, dict[str, str], bytes]] = []
        self.hold: asyncio.Event | None = None  # set: completions wait for it before answering

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            return
        body = await read_request_body(receive)
        path = scope["path"]
        if path == "/metrics" or path.startswith("/metrics/"):  # vLLM's filtered scrapes ask /metrics/
            out, ctype = METRICS, b"text/plain"
        elif path == "/v1/models":
            out, ctype = (
                b'{"object":"list","data":[{"id":"' + MODEL.encode() + b'","object":"model"}]}',
                b"application/json",
            )
        else:
            headers = {k.decode(): v.decode() for k, v in scope["headers"]}
            self.requests.append((path, headers, body))
            if self.hold is not None:
                await self.hold.wait()
            out, ctype = b'{"id":"x","object":"chat.completion","choices":[]}', b"application/json"
        await send(
            {
                "type": "http.response.start",
                "status": 200,
                "headers": [
                    (b"content-type", ctype),
                    (b"connection", b"keep-alive"),
                    (b"x-fleetgate-internal", b"leak"),
                ],
            }
        )
        await send({"type": "http.response.body", "body": out})


@pytest.fixture
async def pod_and_gateway() -> AsyncIterator[tuple[CapturingPod, ClusterGateway]]:
    pod = CapturingPod()
    server = uvicorn.Server(uvicorn.Config(pod, host="127.0.0.1", port=0, log_level="error", lifespan="off"))
    task = asyncio.create_task(server.serve())
    while not server.started:  # noqa: ASYNC110  (uvicorn exposes a flag, not an event)
        await asyncio.sleep(0.01)
    port = server.servers[0].sockets[0].getsockname()[1]
    spec = load_config_data(
        {"discovery": {"static": {"endpoints": [f"http://127.0.0.1:{port}"]}}, "scrape": {"intervalMs": 50}},
        GatewaySpec,
    )
    gw = ClusterGateway(spec, port=0)
    await gw.start()
    for _ in range(250):
        if all(not p.stale and p.models for p in gw.pool.pods()):
            break
        await asyncio.sleep(0.02)
    yield pod, gw
    await gw.stop()
    server.should_exit = True
    await task


async def test_pod_gets_the_request_without_internal_headers_and_with_trace_context(
    pod_and_gateway: tuple[CapturingPod, ClusterGateway],
) -> None:
    setup_tracing("gateway-test", exporter="none")  # an SDK provider, as `fleetgate gateway` installs
    pod, gw = pod_and_gateway
    trace_id = "0af7651916cd43dd8448eb211c80319c"
    body = b'{"model": "m-1", "messages": [{"role": "user", "content": "hi"}]}'
    async with httpx.AsyncClient(base_url=gw.url) as c:
        r = await c.post(
            "/v1/chat/completions",
            content=body,
            headers={
                "content-type": "application/json",
                "authorization": "Bearer sk-user",
                "x-gateway-destination-endpoint": "10.1.1.1:80",
                "x-fleetgate-pod": "other",
                "x-fleetgate-profile": "throughput",
                "traceparent": f"00-{trace_id}-b7ad6b7169203331-01",
                "te": "trailers",
            },
        )
    assert r.status_code == 200
    assert "x-fleetgate-internal" not in r.headers  # pods cannot inject internal headers either
    assert "x-fleetgate-pod" not in r.headers  # debug headers are off by default
    path, headers, got = pod.requests[-1]
    assert path == "/v1/chat/completions" and got == body  # the exact bytes, not re-encoded
    assert headers["authorization"] == "Bearer sk-user"
    assert headers["x-fleetgate-profile"] == "throughput"
    for gone in ("x-gateway-destination-endpoint", "x-fleetgate-pod", "te"):
        assert gone not in headers
    _version, tid, parent, _flags = headers["traceparent"].split("-")
    assert tid == trace_id  # same trace; the parent is the gateway's own span when spans are
    # exported (a processor is installed: an earlier test in this process may have added one), else
    # the client's — the gateway makes no span nobody receives (common.telemetry.data_path_span)
    if spans_exported():
        assert parent != "b7ad6b7169203331"
    else:
        assert parent == "b7ad6b7169203331"


async def test_the_request_id_reaches_the_pod_comes_back_and_is_in_the_access_log(
    pod_and_gateway: tuple[CapturingPod, ClusterGateway], caplog: pytest.LogCaptureFixture
) -> None:
    pod, gw = pod_and_gateway
    body = b'{"model": "m-1", "messages": [{"role": "user", "content": "hi"}]}'
    caplog.set_level(logging.INFO, logger="fleetgate.access")
    async with httpx.AsyncClient(base_url=gw.url, headers={"content-type": "application/json"}) as c:
        r = await c.post("/v1/chat/completions", content=body, headers={"x-request-id": "abc"})
        assert r.status_code == 200 and r.headers["x-request-id"] == "abc"
        assert pod.requests[-1][1]["x-request-id"] == "abc"
        lines = [rec for rec in caplog.records if getattr(rec, "request_id", None) == "abc"]
        assert len(lines) == 1
        line = lines[0]
        assert (line.status, line.outcome, line.model, line.attempts) == (200, "ok", "m-1", 1)  # type: ignore[attr-defined]
        assert line.target == gw.pool.pods()[0].name and line.ttft_ms >= 0  # type: ignore[attr-defined]
        # an id that is not a plain token is replaced, and the new one travels the same way
        r = await c.post("/v1/chat/completions", content=body, headers={"x-request-id": "no spaces please"})
        rid = r.headers["x-request-id"]
        assert rid != "no spaces please" and pod.requests[-1][1]["x-request-id"] == rid
        # errors carry it too
        r = await c.post("/v1/chat/completions", content=b"{oops", headers={"x-request-id": "err-1"})
        assert r.status_code == 400 and r.headers["x-request-id"] == "err-1"
        assert r.headers["content-type"] == "application/json"
        r = await c.get("/nope", headers={"x-request-id": "err-2"})
        assert r.status_code == 404 and r.headers["x-request-id"] == "err-2"


async def test_the_gateway_acknowledges_a_request_before_the_pod_answers(
    pod_and_gateway: tuple[CapturingPod, ClusterGateway],
) -> None:
    """The router's ack deadline (failover.ackTimeoutS) relies on this: `expect: 100-continue` is
    answered with an interim 100 once the gateway has read the request (50 ms later when the body came
    whole, as here), however long the pod takes to its first token, and the expectation is not
    passed on to the pod."""
    pod, gw = pod_and_gateway
    pod.hold = asyncio.Event()
    body = b'{"model": "m-1", "messages": [{"role": "user", "content": "hi"}]}'
    host, port = gw.url.removeprefix("http://").rsplit(":", 1)
    reader, writer = await asyncio.open_connection(host, int(port))
    try:
        writer.write(
            b"POST /v1/chat/completions HTTP/1.1\r\nhost: gw\r\ncontent-type: application/json\r\n"
            b"expect: 100-continue\r\ncontent-length: " + str(len(body)).encode() + b"\r\n\r\n" + body
        )
        interim = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 5.0)
        assert interim == b"HTTP/1.1 100 Continue\r\n\r\n"
        await eventually(lambda: pod.requests, what="the pod got the request")
        assert "expect" not in pod.requests[-1][1]
        pod.hold.set()  # only now does the pod answer
        final = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 5.0)
        assert final.startswith(b"HTTP/1.1 200 ")
    finally:
        writer.close()
