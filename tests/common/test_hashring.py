"""The consistent-hash ring: stable across processes, balanced, and moving ~1/N keys on a change."""

from __future__ import annotations

import zlib
from collections import Counter

from common.hashring import HashRing, point

MEMBERS = ["r0", "r1", "r2"]
KEYS = [point(f"http://10.0.{i // 250}.{i % 250}:8000") for i in range(3000)]


def _owners(ring: HashRing) -> list[str]:
    return [ring.homes(k, 1)[0] for k in KEYS]


def test_every_member_owns_a_fair_share_of_many_keys() -> None:
    shares = Counter(_owners(HashRing(MEMBERS)))
    assert set(shares) == set(MEMBERS)
    assert all(0.2 <= n / len(KEYS) <= 0.47 for n in shares.values()), shares


def test_a_member_leaving_moves_only_its_own_keys() -> None:
    before = _owners(HashRing(MEMBERS))
    after = _owners(HashRing(["r0", "r1"]))
    moved = [b for b, a in zip(before, after, strict=True) if b != a]
    assert moved and set(moved) == {"r2"}  # nothing owned by r0 or r1 moved


def test_points_do_not_depend_on_the_process() -> None:
    # CRC-32, not Python's salted hash(): every replica computes the same ring
    assert point("pod-a") == zlib.crc32(b"pod-a")
    assert HashRing(MEMBERS).homes(point("x"), 3) == HashRing(list(reversed(MEMBERS))).homes(point("x"), 3)
