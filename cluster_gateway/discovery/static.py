"""A fixed pool from URLs (config file or `--pods URL,URL`): set once, then nothing changes."""

from __future__ import annotations

import asyncio
import ipaddress
import urllib.parse
from collections.abc import Sequence

from cluster_gateway.pool import Endpoint, EndpointPool, EngineType
from common.config.gateway import Discovery, StaticDiscovery, StaticEndpoint
from common.config.loader import ConfigError

_FIELD = "discovery.static.endpoints"


def _parse_url(url: str, field: str) -> tuple[str, int, str]:
    """`http://host:port` → (address as used in URLs, port, canonical name)."""

    def bad(why: str) -> ConfigError:
        return ConfigError(f"{field}: {why} (got {url!r}; expected http://host:port)")

    text = url.strip()
    try:
        parts = urllib.parse.urlsplit(text)
        port = parts.port
    except ValueError as exc:
        raise bad(f"invalid URL: {exc}") from None
    if parts.scheme != "http":
        raise bad("scheme must be http" if parts.scheme else "missing scheme")
    host = parts.hostname
    if not host:
        raise bad("missing host")
    if port is None:
        raise bad("missing port")
    if port == 0:
        raise bad("port must be 1-65535")
    if parts.username or parts.password:
        raise bad("credentials are not allowed in an endpoint URL")
    if parts.path not in ("", "/") or parts.query or parts.fragment:
        raise bad("no path, query or fragment allowed")
    try:
        is_v6 = isinstance(ipaddress.ip_address(host), ipaddress.IPv6Address)
    except ValueError:
        is_v6 = False
    address = f"[{host}]" if is_v6 else host
    return address, port, f"http://{address}:{port}"


def endpoints_from_static(cfg: StaticDiscovery) -> list[Endpoint]:
    """Validate every entry; errors name `discovery.static.endpoints[i]`."""
    out: list[Endpoint] = []
    seen: dict[str, int] = {}
    for i, entry in enumerate(cfg.endpoints):
        field = f"{_FIELD}[{i}]"
        spec = entry if isinstance(entry, StaticEndpoint) else StaticEndpoint(url=entry)
        address, port, name = _parse_url(spec.url, field)
        if name in seen:
            raise ConfigError(f"{field}: {spec.url!r} duplicates {_FIELD}[{seen[name]}]")
        seen[name] = i
        engine: EngineType | None = None if spec.engine == "auto" else spec.engine
        out.append(
            Endpoint(
                name=name,
                address=address,
                port=port,
                engine=engine,
                labels=dict(spec.labels),
                annotations=dict(spec.annotations),
            )
        )
    return out


class StaticSource:
    """The pool is the configured list, written once; `run` then idles until cancelled."""

    def __init__(self, cfg: StaticDiscovery) -> None:
        self.endpoints = endpoints_from_static(cfg)

    async def run(self, pool: EndpointPool) -> None:
        pool.set_endpoints(self.endpoints)
        await asyncio.Event().wait()


def static_from_urls(urls: Sequence[str]) -> Discovery:
    """`--pods URL,URL` → a Discovery section; URLs are validated when the source is built."""
    cleaned = [u.strip() for u in urls if u.strip()]
    if not cleaned:
        raise ConfigError("--pods: at least one http://host:port URL is required")
    endpoints: list[StaticEndpoint | str] = list(cleaned)
    return Discovery(static=StaticDiscovery(endpoints=endpoints))
