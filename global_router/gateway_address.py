"""A reported gateway URL, split once into what a connection and a request line need."""

from __future__ import annotations

from dataclasses import dataclass
from urllib.parse import urlsplit


@dataclass(frozen=True, slots=True)
class GatewayAddress:
    host: str
    port: int
    tls: bool
    base_path: bytes  # "" or "/prefix" (a gateway behind a path-routing load balancer)

    def target(self, path: str) -> bytes:
        return self.base_path + path.encode("latin-1")


def parse_gateway_url(url: str) -> GatewayAddress:
    """`http(s)://host[:port][/prefix]` → address (the capacity server validated the URL already)."""
    parts = urlsplit(url)
    tls = parts.scheme == "https"
    host = parts.hostname or "127.0.0.1"
    port = parts.port or (443 if tls else 80)
    return GatewayAddress(host, port, tls, parts.path.rstrip("/").encode("latin-1"))
