"""The server acks in order, ignores replays and refuses reports that would mislead selection."""

from __future__ import annotations

import math

import grpc
import pytest

from common.proto.fleetgate.v1 import capacity_pb2, capacity_pb2_grpc
from global_router.capacity_server import ReportError, validate_report
from tests.global_router.capacity.helpers import TOKEN_A, report, running_server

AUTH = (("authorization", f"Bearer {TOKEN_A}"),)


async def _exchange(port: int, reports: list[capacity_pb2.CapacityReport]) -> list[capacity_pb2.Directive]:
    out: list[capacity_pb2.Directive] = []
    async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as ch:
        call = capacity_pb2_grpc.CapacityServiceStub(ch).Report(metadata=AUTH, timeout=5)
        for r in reports:
            await call.write(r)
            d = await call.read()
            assert isinstance(d, capacity_pb2.Directive)
            out.append(d)
        await call.done_writing()
    return out


async def test_older_sequence_is_ignored_and_acked_with_the_latest() -> None:
    async with running_server(interval_ms=750) as (_, port, fleet):
        replies = await _exchange(port, [report(seq=5), report(seq=3), report(seq=6)])
        assert [d.ack.sequence for d in replies] == [5, 5, 6]
        assert "ignored" in replies[1].message
        assert all(d.report_interval_ms == 750 for d in replies)
        assert fleet.get("c-a").seq == 6  # type: ignore[union-attr]


async def test_invalid_report_is_refused_with_a_message_and_not_published() -> None:
    async with running_server() as (_, port, fleet):
        replies = await _exchange(port, [report(seq=1, url="file:///etc/passwd")])
        assert replies[0].ack.sequence == 0
        assert "gateway_url" in replies[0].message
        assert fleet.get("c-a") is None


async def test_router_drain_set_before_the_cluster_reports_is_in_the_first_directive() -> None:
    async with running_server() as (_, port, fleet):
        await fleet.set_router_drain("c-a", True)
        replies = await _exchange(port, [report(seq=1)])
        assert replies[0].drain is True
        assert fleet.get("c-a").router_drain is True  # type: ignore[union-attr]


@pytest.mark.parametrize(
    ("mutate", "field"),
    [
        (lambda r: setattr(r.models[0], "kv_headroom", 1.5), "kv_headroom"),
        (lambda r: setattr(r.models[0], "kv_headroom", math.nan), "kv_headroom"),
        (lambda r: setattr(r.models[0], "est_ttft_ms", -1.0), "est_ttft_ms"),
        (lambda r: setattr(r.models[0], "model", ""), "model"),
        (lambda r: r.models.append(capacity_pb2.ModelCapacity(model="m")), "twice"),
        (lambda r: setattr(r, "cost_per_gpu_hour", math.inf), "cost_per_gpu_hour"),
        (lambda r: setattr(r.models[0], "saturated_pods", 2), "saturated_pods"),
    ],
)
def test_validate_report_names_the_bad_field(mutate: object, field: str) -> None:
    r = report()
    mutate(r)  # type: ignore[operator]
    with pytest.raises(ReportError, match=field):
        validate_report(r)
