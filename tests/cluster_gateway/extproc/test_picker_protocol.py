"""The ext_proc picker, driven by a real gRPC client playing Envoy's part."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Sequence

import grpc
from envoy.config.core.v3 import base_pb2
from envoy.extensions.filters.http.ext_proc.v3 import processing_mode_pb2
from envoy.service.ext_proc.v3 import external_processor_pb2 as pb
from envoy.service.ext_proc.v3 import external_processor_pb2_grpc as pb_grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc

from cluster_gateway.pool import EndpointPool
from common.config.gateway import Admission

from .conftest import MODEL, Picker, add_pod, inflight, start_picker

DEST = "x-gateway-destination-endpoint"
FULL_DUPLEX = processing_mode_pb2.ProcessingMode.FULL_DUPLEX_STREAMED
BUFFERED = processing_mode_pb2.ProcessingMode.BUFFERED


def headers_msg(
    path: str,
    extra: dict[str, str] | None = None,
    *,
    method: str = "POST",
    eos: bool = False,
    mode: int = FULL_DUPLEX,
) -> pb.ProcessingRequest:
    hs = {
        ":method": method,
        ":path": path,
        ":authority": "gw",
        "content-type": "application/json",
        **(extra or {}),
    }
    hm = base_pb2.HeaderMap(
        headers=[base_pb2.HeaderValue(key=k, raw_value=v.encode()) for k, v in hs.items()]
    )
    return pb.ProcessingRequest(
        request_headers=pb.HttpHeaders(headers=hm, end_of_stream=eos),
        protocol_config=pb.ProtocolConfiguration(request_body_mode=mode),
    )


def body_msgs(body: bytes, chunks: int = 3) -> list[pb.ProcessingRequest]:
    size = max(1, len(body) // chunks + 1)
    parts = [body[i : i + size] for i in range(0, len(body), size)]
    return [
        pb.ProcessingRequest(request_body=pb.HttpBody(body=p, end_of_stream=i == len(parts) - 1))
        for i, p in enumerate(parts)
    ]


def chat_body(content: str = "hello there", model: str = MODEL) -> bytes:
    return json.dumps(
        {"model": model, "messages": [{"role": "user", "content": content}], "max_tokens": 8}
    ).encode()


class Envoyish:
    """An open Process stream; messages go out without waiting for answers (full duplex)."""

    def __init__(self, target: str) -> None:
        self.channel = grpc.aio.insecure_channel(target)
        self.out: asyncio.Queue[pb.ProcessingRequest | None] = asyncio.Queue()
        self.call = pb_grpc.ExternalProcessorStub(self.channel).Process(self._requests())

    async def _requests(self) -> AsyncIterator[pb.ProcessingRequest]:
        while (m := await self.out.get()) is not None:
            yield m

    def send(self, msgs: Sequence[pb.ProcessingRequest]) -> None:
        for m in msgs:
            self.out.put_nowait(m)

    async def recv(self, n: int) -> list[pb.ProcessingResponse]:
        return [await asyncio.wait_for(self.call.read(), 5) for _ in range(n)]

    async def close(self) -> None:
        self.out.put_nowait(None)
        await self.channel.close()


def set_headers(resp: pb.CommonResponse) -> dict[str, str]:
    return {h.header.key: h.header.raw_value.decode() for h in resp.header_mutation.set_headers}


async def test_full_duplex_picks_idle_pod_streams_body_back_and_strips_client_destination(
    picker: Picker,
) -> None:
    env = Envoyish(picker.target)
    body = chat_body("x" * 300)
    env.send(
        [
            headers_msg("/v1/chat/completions", {DEST: "10.9.9.9:1", "x-fleetgate-pod": "busy"}),
            *body_msgs(body),
        ]
    )
    first = (await env.recv(1))[0]
    assert first.WhichOneof("response") == "request_headers"
    common = first.request_headers.response
    assert set_headers(common)[DEST] == "127.0.0.1:9002"  # the idle pod, not the client's choice
    assert "x-fleetgate-pod" in common.header_mutation.remove_headers
    lb = first.dynamic_metadata.fields["envoy.lb"].struct_value.fields[DEST].string_value
    endpoints = lb.split(",")
    assert endpoints[0] == "127.0.0.1:9002" and len(endpoints) == 3 and "10.9.9.9:1" not in lb
    # The body comes back as streamed mutations, ending with end_of_stream.
    echoed = b""
    while True:
        r = (await env.recv(1))[0]
        assert r.WhichOneof("response") == "request_body"
        sr = r.request_body.response.body_mutation.streamed_response
        echoed += sr.body
        if sr.end_of_stream:
            break
    assert echoed == body
    assert inflight(picker.pool, "idle") == 1  # held while the exchange is open
    env.send(
        [
            pb.ProcessingRequest(
                response_headers=pb.HttpHeaders(
                    headers=base_pb2.HeaderMap(
                        headers=[base_pb2.HeaderValue(key=":status", raw_value=b"200")]
                    )
                )
            )
        ]
    )
    r = (await env.recv(1))[0]
    assert r.WhichOneof("response") == "response_headers"
    await env.close()
    for _ in range(100):
        if inflight(picker.pool, "idle") == 0:
            break
        await asyncio.sleep(0.02)
    assert inflight(picker.pool, "idle") == 0  # released when the stream closed


async def test_buffered_mode_answers_headers_first_and_routes_on_the_body_answer(picker: Picker) -> None:
    env = Envoyish(picker.target)
    env.send([headers_msg("/v1/completions", {DEST: "10.9.9.9:1"}, mode=BUFFERED)])
    h = (await env.recv(1))[0]
    assert h.WhichOneof("response") == "request_headers"
    assert DEST in h.request_headers.response.header_mutation.remove_headers
    env.send(
        [
            pb.ProcessingRequest(
                request_body=pb.HttpBody(
                    body=json.dumps({"model": MODEL, "prompt": "hi"}).encode(), end_of_stream=True
                )
            )
        ]
    )
    b = (await env.recv(1))[0]
    assert b.WhichOneof("response") == "request_body"
    assert set_headers(b.request_body.response)[DEST] == "127.0.0.1:9002"
    assert not b.request_body.response.HasField("body_mutation")  # Envoy kept the body itself
    await env.close()


async def test_trailers_end_the_body_in_full_duplex(picker: Picker) -> None:
    env = Envoyish(picker.target)
    body = chat_body()
    env.send(
        [
            headers_msg("/v1/chat/completions"),
            pb.ProcessingRequest(request_body=pb.HttpBody(body=body)),
            pb.ProcessingRequest(request_trailers=pb.HttpTrailers()),
        ]
    )
    kinds = [r.WhichOneof("response") for r in await env.recv(3)]
    assert kinds == ["request_headers", "request_body", "request_trailers"]
    await env.close()


async def immediate(picker_target: str, msgs: list[pb.ProcessingRequest]) -> pb.ImmediateResponse:
    env = Envoyish(picker_target)
    env.send(msgs)
    r = (await env.recv(1))[0]
    await env.close()
    assert r.WhichOneof("response") == "immediate_response", r
    return r.immediate_response


async def test_bad_json_and_unknown_model_get_openai_errors(picker: Picker) -> None:
    bad = await immediate(picker.target, [headers_msg("/v1/chat/completions"), *body_msgs(b"{not json")])
    assert bad.status.code == 400
    assert json.loads(bad.body)["error"]["code"] == "invalid_json"
    unknown = await immediate(
        picker.target, [headers_msg("/v1/chat/completions"), *body_msgs(chat_body(model="nope"))]
    )
    assert unknown.status.code == 404
    assert json.loads(unknown.body)["error"]["code"] == "model_not_found"
    big = await immediate(picker.target, [headers_msg("/v1/completions"), *body_msgs(b"x" * 5000, chunks=5)])
    assert big.status.code == 413


async def test_models_listing_is_the_pool_union_and_unknown_paths_404(picker: Picker) -> None:
    models = await immediate(picker.target, [headers_msg("/v1/models", method="GET", eos=True)])
    assert models.status.code == 200
    assert [m["id"] for m in json.loads(models.body)["data"]] == [MODEL]
    other = await immediate(picker.target, [headers_msg("/admin/x", method="GET", eos=True)])
    assert other.status.code == 404


async def test_no_pods_is_503_and_saturation_without_queue_is_429() -> None:
    empty, server = await start_picker(EndpointPool())
    try:
        r = await immediate(empty.target, [headers_msg("/v1/chat/completions"), *body_msgs(chat_body())])
        assert r.status.code == 503
    finally:
        await server.stop(0)
    pool = EndpointPool()
    add_pod(pool, "full", 9009, waiting=50, kv=0.99)
    full, server = await start_picker(pool, Admission(queue_size=0, queue_timeout_ms=0))
    try:
        r = await immediate(full.target, [headers_msg("/v1/chat/completions"), *body_msgs(chat_body())])
        assert r.status.code == 429
        assert any(h.header.key == "retry-after" for h in r.headers.set_headers)
        assert inflight(pool, "full") == 0
    finally:
        await server.stop(0)


async def test_inflight_is_released_when_envoy_drops_the_stream(picker: Picker) -> None:
    env = Envoyish(picker.target)
    env.send([headers_msg("/v1/chat/completions"), *body_msgs(chat_body())])
    await env.recv(2)
    assert inflight(picker.pool, "idle") == 1
    env.call.cancel()
    await env.channel.close()
    for _ in range(100):
        if inflight(picker.pool, "idle") == 0:
            break
        await asyncio.sleep(0.02)
    assert inflight(picker.pool, "idle") == 0


async def test_health_service_reports_serving(picker: Picker) -> None:
    async with grpc.aio.insecure_channel(picker.target) as ch:
        resp = await health_pb2_grpc.HealthStub(ch).Check(health_pb2.HealthCheckRequest(service=""))
    assert resp.status == health_pb2.HealthCheckResponse.SERVING
