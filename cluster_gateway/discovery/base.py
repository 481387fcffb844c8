"""The discovery interface and the registry that maps a config section to its source."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol, runtime_checkable

from cluster_gateway.pool import EndpointPool


@runtime_checkable
class DiscoverySource(Protocol):
    """Keeps an EndpointPool's membership current; the only writer of membership."""

    async def run(self, pool: EndpointPool) -> None:
        """Populate `pool` and keep it current until cancelled."""
        ...


# Factory for one `discovery.<section>` config section (the section object → a ready source).
DiscoveryFactory = Callable[[Any], DiscoverySource]

_REGISTRY: dict[str, DiscoveryFactory] = {}


def register_discovery(section: str, factory: DiscoveryFactory) -> None:
    """Make `discovery.<section>` selectable; the section name must be a field of `Discovery`."""
    _REGISTRY[section] = factory


def registered_sections() -> list[str]:
    return list(_REGISTRY)


def discovery_factory(section: str) -> DiscoveryFactory:
    return _REGISTRY[section]
