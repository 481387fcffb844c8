"""Tier 1 scheduling: filters → weighted scorers → picker, chosen per request by routing profile.

Every step is a plugin (`plugin.py`): built-in types are registered in `registry.py`, third-party
ones load from the `fleetgate.plugins` entry-point group (see docs/plugins.md).
"""

from cluster_gateway.scheduling.plugin import Filtered, PluginBase, SchedulingHandle, register_plugin
from cluster_gateway.scheduling.prefix_index import PrefixIndex, block_hashes
from cluster_gateway.scheduling.profiles import BUILTIN_PROFILES, ProfileSpec
from cluster_gateway.scheduling.scheduler import Scheduler
from cluster_gateway.scheduling.types import (
    Filter,
    LLMRequest,
    Picker,
    ScheduleResult,
    SchedulingContext,
    Scorer,
)

__all__ = [
    "BUILTIN_PROFILES",
    "Filter",
    "Filtered",
    "LLMRequest",
    "Picker",
    "PluginBase",
    "PrefixIndex",
    "ProfileSpec",
    "ScheduleResult",
    "Scheduler",
    "SchedulingContext",
    "SchedulingHandle",
    "Scorer",
    "block_hashes",
    "register_plugin",
]
