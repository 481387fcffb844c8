"""The routing bench's workloads as data: one registry entry per scenario, no code per scenario.

A headline measured on one workload says little about another, so `fleetgate bench routing
--scenario NAME` replays each of these against the same policies. Every scenario is a fleet (groups of
simulated pods) plus a seeded trace; its `--quick` form is the same fleet and mix over a shorter
window. `lora-scarce` is the workload the headline was first measured on (6 adapters, 2 slots a pod);
the others take away what made it easy (adapter scarcity, bursts, a uniform fleet) or add what makes
routing hard (long shared prefixes, KV pressure from long contexts).
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from bench.trace import TraceSpec

MODEL = "meta-llama/Llama-3.1-8B-Instruct"
ADAPTERS = tuple(f"support-lora-{i}" for i in range(6))


@dataclass(frozen=True, slots=True)
class PodGroup:
    """`replicas` identical simulated pods (one `pods:` entry of `fleetgate sim --pod-spec`)."""

    profile: str
    replicas: int
    max_lora: int = 2
    adapters: tuple[str, ...] = ADAPTERS
    kv_capacity_tokens: int | None = None  # engine override: a smaller KV pool than the profile's
    max_num_seqs: int | None = None  # engine override: the running-sequence cap (None: the profile's)


@dataclass(frozen=True, slots=True)
class RoutingScenario:
    name: str
    about: str  # one line for the table header and `--help`
    pods: tuple[PodGroup, ...]
    trace: TraceSpec  # the full run's trace
    quick_duration_s: float = 40.0

    def trace_for(self, quick: bool, seed: int | None = None, duration_s: float | None = None) -> TraceSpec:
        spec = self.trace
        duration = duration_s or (self.quick_duration_s if quick else spec.duration_s)
        return replace(spec, duration_s=duration, seed=spec.seed if seed is None else seed)

    @property
    def pod_count(self) -> int:
        return sum(g.replicas for g in self.pods)


# The first headline's trace: Poisson 3 req/s with 4x bursts of 5 s every 20 s, 25% long non-streamed
# generations, 6 shared 1,200-token system prompts, 30% of requests for one of 6 LoRA adapters.
_BASE = TraceSpec(
    duration_s=120.0,
    base_rps=3.0,
    burst_every_s=20.0,
    burst_len_s=5.0,
    burst_factor=4.0,
    long_fraction=0.25,
    chat_output=(40, 160),
    long_output=(200, 500),
    system_prompts=6,
    system_prompt_tokens=1200,
    user_tokens=(50, 400),
    base_model=MODEL,
    adapters=ADAPTERS,
    adapter_fraction=0.3,
    seed=7,
)
_NO_LORA = replace(_BASE, adapters=(), adapter_fraction=0.0)
_L4 = "l4-llama3-8b"
_H100 = "h100-llama3-8b"
# Small pods, as in the issue-14 audit ("pods capped at 64 sequences"): the caps every scenario's
# figures so far were measured with. The calibrated profile defaults are vLLM's own (256 on an L4,
# 1,024 on an H100: modelsim/profiles.py); a scenario with those is a different, less crowded one.
_L4_SEQS = 64
_H100_SEQS = 256

SCENARIOS: dict[str, RoutingScenario] = {
    s.name: s
    for s in (
        RoutingScenario(
            "lora-scarce",
            "6 LoRA adapters sharing 2 adapter slots per pod (30% adapter requests), bursts",
            (PodGroup(_L4, 8, max_num_seqs=_L4_SEQS, max_lora=2),),
            _BASE,
        ),
        RoutingScenario(
            "lora-ample",
            "the same trace with 6 slots per pod: every adapter fits everywhere",
            (PodGroup(_L4, 8, max_num_seqs=_L4_SEQS, max_lora=6),),
            _BASE,
        ),
        RoutingScenario(
            "no-adapters",
            "the same arrivals, base model only: 6 shared 1,200-token system prompts, bursts",
            (PodGroup(_L4, 8, max_num_seqs=_L4_SEQS, adapters=()),),
            _NO_LORA,
        ),
        # like llm-d's prefix benchmark (inference-perf `shared_prefix`): a few long system prompts,
        # short questions, short answers; a pod's KV pool holds 4-5 of the prefixes, not all of them
        RoutingScenario(
            "long-shared-prefix",
            "6 shared 4-8k-token prefixes, 20-100-token questions, short answers, 2 req/s with bursts",
            (PodGroup(_L4, 8, max_num_seqs=_L4_SEQS, adapters=()),),
            replace(
                _NO_LORA,
                base_rps=2.0,
                long_fraction=0.0,
                system_prompts=6,
                system_prompt_tokens=4000,
                system_prompt_tokens_max=8000,
                user_tokens=(20, 100),
            ),
        ),
        # H100 pods with a 64k-token KV pool (as with a bigger model or a shared GPU): two 32k prompts
        # fill one pod, so where a long context lands decides who gets preempted
        RoutingScenario(
            "long-context-mix",
            "5% 16-32k-token documents among short chats on 4 H100 pods with a 64k-token KV pool",
            (PodGroup(_H100, 4, max_num_seqs=_H100_SEQS, adapters=(), kv_capacity_tokens=65_536),),
            replace(_NO_LORA, base_rps=6.0, burst_factor=3.0, long_fraction=0.1, huge_fraction=0.05),
        ),
        RoutingScenario(
            "heterogeneous",
            "2 H100 and 6 L4 pods in one pool, base-model traffic at 5 req/s with bursts",
            (
                PodGroup(_H100, 2, max_num_seqs=_H100_SEQS, adapters=()),
                PodGroup(_L4, 6, max_num_seqs=_L4_SEQS, adapters=()),
            ),
            replace(_NO_LORA, base_rps=5.0),
        ),
        RoutingScenario(
            "steady",
            "no bursts: base-model traffic at a constant 4.5 req/s, 6 shared system prompts",
            (PodGroup(_L4, 8, max_num_seqs=_L4_SEQS, adapters=()),),
            replace(_NO_LORA, base_rps=4.5, burst_factor=1.0),
        ),
    )
}
DEFAULT_SCENARIO = "lora-scarce"


def get(name: str) -> RoutingScenario:
    try:
        return SCENARIOS[name]
    except KeyError:
        raise ValueError(f"unknown scenario {name!r}; known: {', '.join(SCENARIOS)}") from None
