"""Regenerate the Python code for the capacity protocol: `python -m common.proto.generate [OUT_DIR]`.

protoc is run with `-I common/proto`, so the descriptor keeps the canonical name
`fleetgate/v1/capacity.proto`; its generated imports (`from fleetgate.v1 import ...`) would clash
with the top-level `fleetgate` CLI package, so they are rewritten to `common.proto.fleetgate.v1`.
The output is deterministic for a given grpcio-tools version; the freshness test compares it with
the committed code leaving out the tool-version stamps, so a grpcio-tools patch release needs no
regeneration (the dependency floors must still cover the stamped versions).
"""

from __future__ import annotations

import re
import sys
from importlib import resources
from pathlib import Path

PROTO_ROOT = Path(__file__).resolve().parent
PROTOS = ("fleetgate/v1/capacity.proto",)
GENERATED_SUFFIXES = ("_pb2.py", "_pb2_grpc.py", "_pb2.pyi")
_IMPORT_RE = re.compile(r"^from fleetgate\.(\S+) import ", re.MULTILINE)


def generated_files(proto: str) -> list[str]:
    stem = proto.removesuffix(".proto")
    return [stem + suffix for suffix in GENERATED_SUFFIXES]


def _fix_imports(path: Path) -> None:
    text = path.read_text()
    fixed = _IMPORT_RE.sub(r"from common.proto.fleetgate.\1 import ", text)
    if fixed != text:
        path.write_text(fixed)


def generate(out_dir: Path = PROTO_ROOT) -> list[Path]:
    """Run protoc for every proto into `out_dir` (same relative layout); returns the files written."""
    from grpc_tools import protoc  # dev dependency: only needed to regenerate

    well_known = str(resources.files("grpc_tools") / "_proto")
    out_dir.mkdir(parents=True, exist_ok=True)
    written: list[Path] = []
    for proto in PROTOS:
        args = [
            "grpc_tools.protoc",
            f"-I{PROTO_ROOT}",
            f"-I{well_known}",
            f"--python_out={out_dir}",
            f"--pyi_out={out_dir}",
            f"--grpc_python_out={out_dir}",
            proto,
        ]
        if protoc.main(args) != 0:
            raise RuntimeError(f"protoc failed for {proto}")
        for rel in generated_files(proto):
            path = out_dir / rel
            _fix_imports(path)
            written.append(path)
    return written


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    out = Path(args[0]) if args else PROTO_ROOT
    for path in generate(out):
        print(path)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
