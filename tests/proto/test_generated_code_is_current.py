"""The committed generated code must match what `python -m common.proto.generate` produces now."""

from __future__ import annotations

from pathlib import Path

import pytest

from common.proto import generate


def test_generated_code_is_byte_identical_to_a_fresh_generation(tmp_path: Path) -> None:
    pytest.importorskip("grpc_tools")
    written = generate.generate(tmp_path)
    assert written, "the generator produced no files"
    for fresh in written:
        rel = fresh.relative_to(tmp_path)
        committed = generate.PROTO_ROOT / rel
        assert committed.exists(), f"{rel} is not committed; run python -m common.proto.generate"
        assert fresh.read_bytes() == committed.read_bytes(), (
            f"{rel} is out of date; run python -m common.proto.generate"
        )


def test_generated_modules_import_under_the_common_package() -> None:
    from common.proto.fleetgate.v1 import capacity_pb2, capacity_pb2_grpc

    assert capacity_pb2.DESCRIPTOR.package == "fleetgate.v1"
    assert capacity_pb2_grpc.CapacityServiceStub is not None
    report = capacity_pb2.CapacityReport(cluster_id="a", sequence=7)
    assert capacity_pb2.CapacityReport.FromString(report.SerializeToString()).sequence == 7
    source = (generate.PROTO_ROOT / "fleetgate/v1/capacity_pb2_grpc.py").read_text()
    assert "from common.proto.fleetgate.v1 import capacity_pb2" in source
