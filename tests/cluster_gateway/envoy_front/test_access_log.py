"""Envoy's access-log lines → outlier detection and ext_authz releases; a batch needs Envoy's token."""

from __future__ import annotations

import hashlib
from typing import Any, cast

import grpc
import pytest
from opentelemetry.proto.collector.logs.v1 import logs_service_pb2, logs_service_pb2_grpc

from cluster_gateway.envoy_front.access_log import LINE_FORMAT, AccessLogService, OutcomeFeed, access_logger
from cluster_gateway.envoy_front.token import EnvoyToken
from cluster_gateway.extproc.server import ExtProcServer
from cluster_gateway.pool import EndpointPool, PodState
from cluster_gateway.request_path.outliers import OutlierDetector
from tests.cluster_gateway.extproc.conftest import add_pod


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
    status: int | None, upstream: str | None = "127.0.0.1:9001", pick: str | None = None, flags: str = "-"
) -> str:
    """The line Envoy formats (LINE_FORMAT) for one request."""
    return f"{status or 0} {flags} {upstream or '-'} {pick or '-'}"


def batch(*lines: str) -> logs_service_pb2.ExportLogsServiceRequest:
    req = logs_service_pb2.ExportLogsServiceRequest()
    records = req.resource_logs.add().scope_logs.add().log_records
    for line in lines:
        records.add().body.string_value = line
    return req


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
        entry(503, flags="UF,URX"),  # connection failure, retried elsewhere: still this pod's failure
        entry(200, flags="UR"),  # reset after the status: still Envoy's kind of failure
        entry(0, flags="UT"),
        entry(200, flags="DC"),  # the client went away: not the pod's doing
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
        ("success", "a", None),
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


def test_a_forged_pick_header_cannot_shift_the_fields_envoy_writes() -> None:
    f, rec, released = feed()
    f.apply(entry(200, pick="0.1 503 UF 127.0.0.1:9001"))
    assert released == [("0.1 503 UF 127.0.0.1:9001", 200)] and rec.calls == [("success", "a", None)]


def test_the_line_envoy_is_told_to_write_is_the_one_read() -> None:
    body = access_logger(cluster="c", flush_ms=50, picks=True)["typed_config"]["body"]["string_value"]
    assert body == LINE_FORMAT.format(pick="%REQ(x-fleetgate-pick)%")
    assert access_logger(cluster="c", flush_ms=50)["typed_config"]["body"]["string_value"].endswith(" -")


@pytest.mark.parametrize("presented", [None, "wrong"])
async def test_a_log_batch_without_envoys_token_is_refused(presented: str | None) -> None:
    token = "envoy-token"
    f, rec, released = feed()
    service = AccessLogService(f, EnvoyToken([hashlib.sha256(token.encode()).hexdigest()]))
    server = ExtProcServer(cast(Any, PickerStub()), access_log=service)
    port = await server.start("127.0.0.1", 0)
    try:
        async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as ch:
            stub = logs_service_pb2_grpc.LogsServiceStub(ch)
            md = None if presented is None else (("x-fleetgate-envoy-token", presented),)
            with pytest.raises(grpc.aio.AioRpcError) as refused:
                await stub.Export(batch(entry(500)), metadata=md)
            assert refused.value.code() == grpc.StatusCode.UNAUTHENTICATED
            assert rec.calls == []
            # an odd record is skipped, not the batch
            lines = batch(entry(500), "garbage", entry(200, pick="1.2"))
            await stub.Export(lines, metadata=(("x-fleetgate-envoy-token", token),))
            assert rec.calls == [("failure", "a", False), ("success", "a", None)]
            assert released == [("1.2", 200)]
    finally:
        await server.stop(0)
