"""STREAMED body mode (envoy_bootstrap()'s default) and a skipped response phase, with a real gRPC
client playing Envoy: the pick rides on the headers answer, every body chunk gets a bare CONTINUE
(Envoy kept the bytes), and the stream's close alone releases the pod and counts the request ok."""

from __future__ import annotations

from envoy.extensions.filters.http.ext_proc.v3 import processing_mode_pb2
from envoy.service.ext_proc.v3 import external_processor_pb2 as pb

from tests.eventually import eventually

from .conftest import Picker, inflight
from .test_picker_protocol import DEST, Envoyish, body_msgs, chat_body, set_headers

STREAMED = processing_mode_pb2.ProcessingMode.STREAMED


def streamed_headers(*, ahead: bool = True) -> pb.ProcessingRequest:
    from .test_picker_protocol import headers_msg

    msg = headers_msg("/v1/chat/completions", {DEST: "10.9.9.9:1"}, mode=STREAMED)
    msg.protocol_config.send_body_without_waiting_for_header_response = ahead
    return msg


def ok_count(picker: Picker, pod: str) -> float:
    return sum(
        sample.value
        for family in picker.metrics.registry.collect()
        for sample in family.samples
        if sample.name == "fleetgate_gateway_requests_total"
        and sample.labels.get("pod") == pod
        and sample.labels.get("outcome") == "ok"
    )


async def test_streamed_mode_picks_on_the_headers_answer_and_continues_each_chunk(picker: Picker) -> None:
    env = Envoyish(picker.target)
    env.send([streamed_headers(), *body_msgs(chat_body(), chunks=3)])
    got = await env.recv(4)
    assert [r.WhichOneof("response") for r in got] == ["request_headers", *["request_body"] * 3]
    head = got[0].request_headers.response
    assert set_headers(head)[DEST] == "127.0.0.1:9002"  # the idle pod, never the client's value
    assert got[0].dynamic_metadata.fields["envoy.lb"].struct_value.fields[DEST].string_value
    for r in got[1:]:  # no body comes back: Envoy still holds it
        assert not r.request_body.response.HasField("body_mutation")
    assert inflight(picker.pool, "idle") == 1
    before = ok_count(picker, "idle")
    await env.close()  # Envoy closes the stream when the HTTP request ends; no response phase
    await eventually(lambda: inflight(picker.pool, "idle") == 0, within=3.0, what="slot released on close")
    assert ok_count(picker, "idle") == before + 1  # response phase skipped: the close is the end


async def test_streamed_mode_without_sending_the_body_ahead_is_refused_not_hung(picker: Picker) -> None:
    env = Envoyish(picker.target)
    env.send([streamed_headers(ahead=False)])
    r = (await env.recv(1))[0]
    assert r.WhichOneof("response") == "immediate_response"
    assert r.immediate_response.status.code == 500
    assert b"send_body_without_waiting_for_header_response" in r.immediate_response.body
    assert inflight(picker.pool, "idle") == 0
    await env.close()
