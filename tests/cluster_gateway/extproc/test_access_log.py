"""Envoy's access-log entries → outlier detection and ext_authz releases; the stream needs Envoy's token."""

from __future__ import annotations

import hashlib
from typing import Any, cast

import grpc
import pytest
from envoy.config.core.v3 import address_pb2
from envoy.data.accesslog.v3 import accesslog_pb2 as al
from envoy.service.accesslog.v3 import als_pb2, als_pb2_grpc
from google.protobuf import wrappers_pb2

from cluster_gateway.extproc.access_log import AccessLogService, OutcomeFeed
from cluster_gateway.extproc.envoy_token import EnvoyToken
from cluster_gateway.extproc.server import ExtProcServer
from cluster_gateway.pool import EndpointPool, PodState
from cluster_gateway.request_path.outliers import OutlierDetector

from .conftest import add_pod


class Recorder:
    def __init__(self) -> None:
        self.calls: list[tuple[str, str, bool | None]] = []

    def failure(self, pod: PodState, *, gateway: bool) -> None:
        self.calls.append(("failure", pod.name, gateway))

    def shed(self, pod: PodState) -> None:
        self.calls.append(("shed", pod.name, None))

    def success(self, pod: PodState) -> None:
        self.calls.append(("success", pod.name, None))


class PickerStub:
    async def Process(self, request_iterator: Any, context: Any) -> Any:  # not called here
        yield None


def entry(
    status: int | None, upstream: str | None = "127.0.0.1:9001", pick: str | None = None, **flags: bool
) -> al.HTTPAccessLogEntry:
    e = al.HTTPAccessLogEntry()
    if status is not None:
        e.response.response_code.CopyFrom(wrappers_pb2.UInt32Value(value=status))
    if upstream is not None:
        host, port = upstream.rsplit(":", 1)
        e.common_properties.upstream_remote_address.CopyFrom(
            address_pb2.Address(socket_address=address_pb2.SocketAddress(address=host, port_value=int(port)))
        )
    for name, on in flags.items():
        setattr(e.common_properties.response_flags, name, on)
    if pick is not None:
        e.request.request_headers["x-fleetgate-pick"] = pick
    return e


def feed(**kw: Any) -> tuple[OutcomeFeed, Recorder, list[tuple[str, int]]]:
    pool = EndpointPool()
    add_pod(pool, "a", 9001)
    add_pod(pool, "b", 9002)
    rec, released = Recorder(), []
    f = OutcomeFeed(pool, cast(OutlierDetector, rec), lambda pid, st: released.append((pid, st)), **kw)
    return f, rec, released


def test_statuses_map_to_outcomes_like_the_embedded_proxys() -> None:
    f, rec, _ = feed()
    for e in (
        entry(200),
        entry(500),
        entry(503, "127.0.0.1:9002"),
        entry(429),
        entry(503, upstream_connection_failure=True),
        entry(200, upstream_remote_reset=True),  # reset after the status: still Envoy's kind of failure
        entry(0, upstream_request_timeout=True),
        entry(404, None),  # refused before any pod: nothing to learn
        entry(200, "10.9.9.9:1"),  # not in the pool
        entry(None, "127.0.0.1:9001"),  # no response at all (the client left): no verdict
    ):
        f.apply(e)
    assert rec.calls == [
        ("success", "a", None),
        ("failure", "a", False),
        ("failure", "b", True),
        ("shed", "a", None),
        ("failure", "a", True),
        ("failure", "a", True),
        ("failure", "a", True),
    ]


def test_pick_ids_are_released_with_their_status_and_outcomes_can_be_left_to_the_picker() -> None:
    f, rec, released = feed(outcomes=False)
    f.apply(entry(200, pick="0.1"))
    f.apply(entry(None, None, pick="1.7"))
    f.apply(entry(500))
    assert released == [("0.1", 200), ("1.7", 0)] and rec.calls == []


def test_a_pool_change_is_seen_by_the_address_index() -> None:
    f, rec, _ = feed()
    f.apply(entry(200, "127.0.0.1:9003"))
    add_pod(f.pool, "c", 9003)
    f.apply(entry(200, "127.0.0.1:9003"))
    assert rec.calls == [("success", "c", None)]


@pytest.mark.parametrize("presented", [None, "wrong"])
async def test_a_log_stream_without_envoys_token_is_refused(presented: str | None) -> None:
    token = "envoy-token"
    f, rec, _ = feed()
    service = AccessLogService(f, EnvoyToken([hashlib.sha256(token.encode()).hexdigest()]))
    server = ExtProcServer(cast(Any, PickerStub()), access_log=service)
    port = await server.start("127.0.0.1", 0)
    msg = als_pb2.StreamAccessLogsMessage()
    msg.http_logs.log_entry.append(entry(500))
    try:
        async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as ch:
            stub = als_pb2_grpc.AccessLogServiceStub(ch)

            async def messages() -> Any:
                yield msg

            md = None if presented is None else (("x-fleetgate-envoy-token", presented),)
            with pytest.raises(grpc.aio.AioRpcError) as refused:
                await stub.StreamAccessLogs(messages(), metadata=md)
            assert refused.value.code() == grpc.StatusCode.UNAUTHENTICATED
            assert rec.calls == []
            await stub.StreamAccessLogs(messages(), metadata=(("x-fleetgate-envoy-token", token),))
            assert rec.calls == [("failure", "a", False)]
    finally:
        await server.stop(0)
