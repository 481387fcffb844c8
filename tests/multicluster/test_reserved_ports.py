"""The bed's fixed listening ports are kept out of every namespace's ephemeral range.

Several servers share a namespace (both router replicas live in `global`). Without the
reservation, an outgoing connection of one (its Redis client) could take a fixed port such as
50052 as its source port before the other binds it, and the second replica failed to start with
"address in use" (seen once in CI)."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from fleetgate.netbed import bed, netns
from fleetgate.netbed.scenarios import TWO_REGIONS

# binds port 0 until the ephemeral range is exhausted, holding every socket; prints the ports it got
_TAKE_EVERY_EPHEMERAL_PORT = """
import socket
held, ports = [], []
while True:
    s = socket.socket()
    try:
        s.bind(("127.0.0.1", 0))
    except OSError:
        break
    held.append(s)
    ports.append(s.getsockname()[1])
print(",".join(map(str, ports)))
"""


def _expand(spec: str) -> set[int]:
    ports: set[int] = set()
    for part in spec.split(","):
        lo, _, hi = part.partition("-")
        ports.update(range(int(lo), int(hi or lo) + 1))
    return ports


@pytest.fixture
def nets() -> Iterator[netns.Namespaces]:
    reason = netns.unavailable_reason()
    if reason is not None:
        pytest.skip(f"netns unavailable: {reason}")
    n = netns.Namespaces("50051-50052")
    try:
        yield n
    finally:
        assert not n.delete_all()


@pytest.mark.netns
def test_reserved_ports_are_never_handed_out_as_source_ports(nets: netns.Namespaces) -> None:
    nets.create_hub()
    nets.add_leaf("global", 1)
    leaf = nets.name("global")
    nets.sysctl(leaf, "net.ipv4.ip_local_port_range=50050 50053")  # four ports, two of them reserved
    done = subprocess.run(
        nets.exec_argv(leaf, [sys.executable, "-c", _TAKE_EVERY_EPHEMERAL_PORT]),
        capture_output=True,
        text=True,
        timeout=30,
        check=True,
    )
    assert set(map(int, done.stdout.strip().split(","))) == {50050, 50053}


def test_every_fixed_port_of_the_bed_is_reserved() -> None:
    reserved = _expand(bed.RESERVED_PORTS)
    replicas = range(bed.MAX_REPLICAS)
    fixed = {bed.GATEWAY_PORT, bed.REDIS_PORT}
    fixed |= {
        base + r
        for base in (bed.REDIS_LINK_PORT, bed.ROUTER_HTTP_PORT, bed.ROUTER_GRPC_PORT, bed.SIM_BASE_PORT)
        for r in replicas
    }
    assert fixed <= reserved


def test_a_topology_beyond_the_reservation_is_refused(tmp_path: Path) -> None:
    too_many = bed.Topology(TWO_REGIONS.clusters, TWO_REGIONS.region_ms, routers=bed.MAX_REPLICAS + 1)
    with pytest.raises(ValueError, match="at most"):
        bed.Testbed(too_many, tmp_path)
