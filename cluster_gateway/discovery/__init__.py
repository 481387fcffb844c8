"""Discovery: which model-server pods exist. One source per gateway, chosen by the config section set."""

from __future__ import annotations

from typing import Any

from cluster_gateway.discovery.base import (
    DiscoverySource,
    discovery_factory,
    register_discovery,
    registered_sections,
)
from cluster_gateway.discovery.static import StaticSource, static_from_urls
from common.config.gateway import Discovery
from common.config.loader import ConfigError

__all__ = [
    "DiscoverySource",
    "StaticSource",
    "build_discovery",
    "register_discovery",
    "static_from_urls",
]


def _kubernetes(section: Any) -> DiscoverySource:
    from cluster_gateway.discovery.kubernetes import KubernetesSource  # the client is only needed here

    return KubernetesSource(section)


register_discovery("static", StaticSource)
register_discovery("kubernetes", _kubernetes)


def build_discovery(discovery: Discovery) -> DiscoverySource:
    """The source for whichever `discovery.<section>` is set; bad settings raise ConfigError."""
    chosen = [name for name in registered_sections() if getattr(discovery, name, None) is not None]
    if len(chosen) != 1:
        found = ", ".join(chosen) or "none"
        raise ConfigError(
            f"discovery: set exactly one of {', '.join(registered_sections())} (found: {found})"
        )
    name = chosen[0]
    return discovery_factory(name)(getattr(discovery, name))
