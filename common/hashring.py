"""A consistent-hash ring over names (CRC-32 points, the same in every process and replica).

Used where several gateway replicas must agree without talking: a prompt prefix's home pods
(`cluster_gateway.scheduling.prefix_home`) and which replica scrapes which pod
(`cluster_gateway.metrics.sharing`). When a member joins or leaves only ~1/N of the keys move.
Python's `hash()` is salted per process, so keys and ring points use CRC-32 instead.
"""

from __future__ import annotations

import bisect
import zlib
from collections.abc import Iterable

__all__ = ["VNODES", "HashRing", "point"]

VNODES = 32  # ring points per member: keeps the share of keys per member within a few percent


def point(data: str) -> int:
    """A stable 32-bit point for `data` (CRC-32 of its UTF-8)."""
    return zlib.crc32(data.encode("utf-8", "surrogatepass"))


class HashRing:
    """`vnodes` points per pod, each a CRC-32 continued from the pod name's; built with one integer
    sort (point and pod index packed in one int), ~10 ms for 1000 pods, on membership changes only."""

    def __init__(self, names: Iterable[str], vnodes: int = VNODES) -> None:
        uniq = sorted(set(names))
        suffixes = [b"#%d" % v for v in range(vnodes)]
        packed = sorted(
            (zlib.crc32(sfx, point(name)) << 20) | i for i, name in enumerate(uniq) for sfx in suffixes
        )
        self._keys = [p >> 20 for p in packed]
        self._names = [uniq[p & 0xFFFFF] for p in packed]
        self._members = frozenset(uniq)
        self.size = len(uniq)

    def has_members(self, names: Iterable[str]) -> bool:
        """Whether the ring was built for exactly these pods."""
        return self._members == frozenset(names)

    def homes(self, key: int, count: int) -> list[str]:
        """The first `count` distinct pods clockwise from `key`."""
        if not self._keys:
            return []
        count = min(count, self.size)
        out: list[str] = []
        i = bisect.bisect_left(self._keys, key)
        n = len(self._keys)
        for step in range(n):
            name = self._names[(i + step) % n]
            if name not in out:
                out.append(name)
                if len(out) == count:
                    break
        return out
