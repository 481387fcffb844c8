"""Tier 1 scheduling: filters → weighted scorers → picker, chosen per request by routing profile."""

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
    "LLMRequest",
    "Picker",
    "PrefixIndex",
    "ProfileSpec",
    "ScheduleResult",
    "Scheduler",
    "SchedulingContext",
    "Scorer",
    "block_hashes",
]
