"""The committed generated code must match what `python -m common.proto.generate` produces now.

protoc stamps its own version into the output (`GRPC_GENERATED_VERSION`, the protobuf runtime
check). A patch release of grpcio-tools changes only those stamps, so the comparison leaves them
out, and a separate test checks that the package's dependency floors cover the stamped versions
(older runtimes refuse to import the code).
"""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

import pytest

from common.proto import generate

_GRPC_STAMP = re.compile(r"^GRPC_GENERATED_VERSION = '([0-9.]+)'$", re.MULTILINE)
_PROTOBUF_STAMP = re.compile(r"^# Protobuf Python Version: ([0-9.]+)$", re.MULTILINE)
_PROTOBUF_CHECK = re.compile(
    r"(_runtime_version\.ValidateProtobufRuntimeVersion\(\s*_runtime_version\.Domain\.PUBLIC,)"
    r"\s*\d+,\s*\d+,\s*\d+,"
)
_PYPROJECT = Path(__file__).resolve().parents[2] / "pyproject.toml"


def _without_tool_stamps(text: str) -> str:
    text = _GRPC_STAMP.sub("GRPC_GENERATED_VERSION = <stamp>", text)
    text = _PROTOBUF_STAMP.sub("# Protobuf Python Version: <stamp>", text)
    return _PROTOBUF_CHECK.sub(r"\1 <stamp>", text)


def _version(text: str) -> tuple[int, ...]:
    return tuple(int(part) for part in text.split("."))


def _floor(package: str) -> tuple[int, ...]:
    deps = tomllib.loads(_PYPROJECT.read_text())["project"]["dependencies"]
    spec = next(d for d in deps if re.match(rf"{re.escape(package)}\s*>=", d))
    return _version(spec.split(">=", 1)[1].strip())


def test_generated_code_matches_a_fresh_generation_up_to_the_tool_version(tmp_path: Path) -> None:
    pytest.importorskip("grpc_tools")
    written = generate.generate(tmp_path)
    assert written, "the generator produced no files"
    for fresh in written:
        rel = fresh.relative_to(tmp_path)
        committed = generate.PROTO_ROOT / rel
        assert committed.exists(), f"{rel} is not committed; run python -m common.proto.generate"
        assert _without_tool_stamps(fresh.read_text()) == _without_tool_stamps(committed.read_text()), (
            f"{rel} is out of date; run python -m common.proto.generate"
        )


def test_stamp_removal_hides_only_the_version_numbers() -> None:
    a = "GRPC_GENERATED_VERSION = '1.85.1'\nx = 1\n"
    b = "GRPC_GENERATED_VERSION = '1.85.4'\nx = 1\n"
    assert _without_tool_stamps(a) == _without_tool_stamps(b)
    assert _without_tool_stamps(a) != _without_tool_stamps(b.replace("x = 1", "x = 2"))
    check = "_runtime_version.ValidateProtobufRuntimeVersion(\n    _runtime_version.Domain.PUBLIC,\n    7,\n    35,\n    1,\n    '',"
    assert _without_tool_stamps(check) == _without_tool_stamps(check.replace("35", "36"))


def test_the_dependency_floors_cover_the_versions_stamped_into_the_committed_code() -> None:
    grpc_code = (generate.PROTO_ROOT / "fleetgate/v1/capacity_pb2_grpc.py").read_text()
    pb_code = (generate.PROTO_ROOT / "fleetgate/v1/capacity_pb2.py").read_text()
    grpc_stamp = _GRPC_STAMP.search(grpc_code)
    pb_stamp = _PROTOBUF_STAMP.search(pb_code)
    assert grpc_stamp and pb_stamp
    assert _floor("grpcio") >= _version(grpc_stamp.group(1))
    assert _floor("protobuf") >= _version(pb_stamp.group(1))


def test_generated_modules_import_under_the_common_package() -> None:
    from common.proto.fleetgate.v1 import capacity_pb2, capacity_pb2_grpc

    assert capacity_pb2.DESCRIPTOR.package == "fleetgate.v1"
    assert capacity_pb2_grpc.CapacityServiceStub is not None
    report = capacity_pb2.CapacityReport(cluster_id="a", sequence=7)
    assert capacity_pb2.CapacityReport.FromString(report.SerializeToString()).sequence == 7
    source = (generate.PROTO_ROOT / "fleetgate/v1/capacity_pb2_grpc.py").read_text()
    assert "from common.proto.fleetgate.v1 import capacity_pb2" in source
