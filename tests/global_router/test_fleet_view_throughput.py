"""The per-GPU throughput in the fleet view: sanitised from reports, decodable from older records."""

from __future__ import annotations

import math
import time

import msgspec
import pytest

from common.proto.fleetgate.v1 import capacity_pb2
from global_router.fleet_view import ClusterState, state_from_report
from tests.global_router.fleet_fixtures import MODEL, cluster


def _report(rate: float) -> capacity_pb2.CapacityReport:
    model = capacity_pb2.ModelCapacity(model="m", ready_pods=1, gpu_tokens_per_second=rate)
    return capacity_pb2.CapacityReport(cluster_id="c", gateway_url="http://gw:1", models=[model])


@pytest.mark.parametrize("bad", [math.nan, math.inf, -5.0, 0.0])
def test_unusable_throughput_reads_as_not_reported(bad: float) -> None:
    assert state_from_report(_report(bad), time.time()).models["m"].gpu_tokens_per_s == 0.0


def test_reported_throughput_is_kept() -> None:
    assert state_from_report(_report(1234.5), time.time()).models["m"].gpu_tokens_per_s == 1234.5


def test_state_round_trips_through_json_and_older_records_decode_as_unknown() -> None:
    state = cluster("c", gpu_tokens_per_s=321.0)
    raw = msgspec.json.encode(state)
    assert msgspec.json.decode(raw, type=ClusterState).models[MODEL].gpu_tokens_per_s == 321.0
    doc = msgspec.json.decode(raw)
    del doc["models"][MODEL]["gpu_tokens_per_s"]  # as a replica without the field stored it
    old = msgspec.json.decode(msgspec.json.encode(doc), type=ClusterState)
    assert old.models[MODEL].gpu_tokens_per_s == 0.0
