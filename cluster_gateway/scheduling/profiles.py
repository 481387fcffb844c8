"""Routing profiles: named weight sets plus saturation thresholds, filter chain and picker.

A profile names plugins (`plugin.py`); names resolve to `scheduling.plugins` entries, else to the
built-in plugin types of the same name, when the scheduler compiles the profile (`plans.py`).
Built-in profiles give sensible behaviour with no config; `scheduling.profiles` in config overrides
them weight by weight (or defines new ones). Baseline profiles (`reference`, `round-robin`,
`least-inflight`) reproduce the usual alternatives so benchmarks and A/B tests can compare against
them through the same gateway.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from common.config import ConfigError
from common.config.gateway import Profile, Saturation, Scheduling

DEFAULT_FILTERS: tuple[str, ...] = ("model", "healthy", "fresh", "saturation")
DEFAULT_PICKER = "max_score"
DEFAULT_DEGRADED: Mapping[str, float] = {"inflight": 1.0}  # live counts only, when no metrics are fresh
_DEFAULT_SATURATION = Saturation()


@dataclass(frozen=True, slots=True)
class ProfileSpec:
    name: str
    weights: Mapping[str, float]  # scorer plugin name → weight > 0
    queue_depth: int = _DEFAULT_SATURATION.queue_depth
    kv_usage: float = _DEFAULT_SATURATION.kv_usage
    filters: tuple[str, ...] = DEFAULT_FILTERS
    picker: str = DEFAULT_PICKER
    sheddable: bool = False
    plugins: tuple[str, ...] = ()  # more plugins by name, placed by their hooks
    degraded_weights: Mapping[str, float] = field(default_factory=lambda: dict(DEFAULT_DEGRADED))


BUILTIN_PROFILES: dict[str, ProfileSpec] = {
    p.name: p
    for p in (
        # Interactive chat: time to first token. The estimated queue leads; in-flight and load keep
        # bursts spread between scrapes; prefix affinity saves prefill but fades with load. LoRA
        # weighs heavily but only for adapter requests (base-model requests score 1.0 everywhere):
        # a must-evict pod makes the request wait for a slot and an adapter load. prefix_home makes
        # several gateway replicas agree on where a new prefix goes. `prefill` counts the prompt
        # tokens a pod would still compute, so affinity grows with the prefill it saves: it decides
        # long shared prefixes (a cold 6k-token prefill costs an L4 seconds) and barely moves short
        # system prompts (quiet-machine `bench routing` scenario runs, docs/benchmarks.md).
        ProfileSpec(
            "latency",
            {
                "queue": 3.0,
                "inflight": 2.0,
                "kv_cache": 1.5,
                "prefix": 2.5,
                "prefix_home": 2.0,
                "lora": 6.0,
                "load": 1.0,
                "prefill": 4.0,
            },
        ),
        # Batch: pack where the KV cache has room and the prefix is warm; queues are tolerated.
        ProfileSpec(
            "throughput",
            {"kv_cache": 3.0, "prefix": 3.0, "prefix_home": 2.0, "lora": 6.0, "queue": 1.0, "inflight": 0.5},
            queue_depth=32,
            kv_usage=0.95,
        ),
        # The Gateway API Inference Extension's default EPP config as its chart ships it
        # (default-plugins.yaml: queue-scorer 2, kv-cache-utilization-scorer 2, prefix-cache-scorer 3,
        # max-score picker, no filter in the scheduling profile): the baseline to beat, with no
        # Fleetgate extras (no LoRA affinity, no live in-flight counts, no saturation filter).
        ProfileSpec(
            "reference",
            {"queue_waiting": 2.0, "kv_raw": 2.0, "prefix_raw": 3.0},
            filters=("model", "healthy"),
        ),
        ProfileSpec("round-robin", {}, filters=("model", "healthy"), picker="round_robin"),
        ProfileSpec("least-inflight", {"inflight": 1.0}, filters=("model", "healthy")),
    )
}


def _merge(name: str, cfg: Profile, base: ProfileSpec | None) -> ProfileSpec:
    weights = dict(base.weights) if base is not None else {}
    weights.update(cfg.weights)
    sat = cfg.saturation
    if base is not None and sat == _DEFAULT_SATURATION:
        queue_depth, kv_usage = base.queue_depth, base.kv_usage
    else:
        queue_depth, kv_usage = sat.queue_depth, sat.kv_usage
    if cfg.filters is not None:
        chain = tuple(cfg.filters)
    else:
        chain = base.filters if base is not None else DEFAULT_FILTERS
    picker = cfg.picker or (base.picker if base is not None else DEFAULT_PICKER)
    degraded: Mapping[str, float] = DEFAULT_DEGRADED if base is None else base.degraded_weights
    if cfg.degraded_weights is not None:
        degraded = cfg.degraded_weights
    return ProfileSpec(
        name=name,
        weights={k: float(v) for k, v in weights.items()},  # 0 = off, still checked as a name
        queue_depth=queue_depth,
        kv_usage=kv_usage,
        filters=chain,
        picker=picker,
        sheddable=cfg.sheddable or (base.sheddable if base is not None else False),
        plugins=(*(base.plugins if base is not None else ()), *cfg.plugins),
        degraded_weights={k: float(v) for k, v in degraded.items()},
    )


def build_profiles(cfg: Scheduling) -> dict[str, ProfileSpec]:
    """Built-ins merged with config; raises ConfigError naming the offending field. Plugin names are
    checked when the scheduler compiles the profiles."""
    out = dict(BUILTIN_PROFILES)
    for name, pcfg in cfg.profiles.items():
        out[name] = _merge(name, pcfg, BUILTIN_PROFILES.get(name))
    if cfg.default_profile not in out:
        raise ConfigError(
            f"field `scheduling.defaultProfile`: unknown profile {cfg.default_profile!r} "
            f"(known: {', '.join(sorted(out))})"
        )
    for model, pname in cfg.model_profiles.items():
        if pname not in out:
            raise ConfigError(
                f"field `scheduling.modelProfiles.{model}`: unknown profile {pname!r} "
                f"(known: {', '.join(sorted(out))})"
            )
    return out


class ProfileSelector:
    """Header profile if known (an unknown one falls back, it is not an error), then by model, then default."""

    def __init__(self, profiles: Mapping[str, ProfileSpec], cfg: Scheduling) -> None:
        self._profiles = dict(profiles)
        self._by_model = {m: self._profiles[p] for m, p in cfg.model_profiles.items()}
        self._default = self._profiles[cfg.default_profile]

    def select(self, requested: str | None, model: str) -> ProfileSpec:
        if requested:
            p = self._profiles.get(requested)
            if p is not None:
                return p
        return self._by_model.get(model, self._default)

    def names(self) -> list[str]:
        return list(self._profiles)
