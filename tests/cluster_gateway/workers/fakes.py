"""A stand-in for a worker's feed connection: keeps what the gateway process writes to it."""

from __future__ import annotations


class Writer:
    def __init__(self) -> None:
        self.frames: list[bytes] = []

    def write(self, data: bytes) -> None:
        self.frames.append(data)

    def is_closing(self) -> bool:
        return False
