"""Seeded arrival traces: a Poisson base with bursts, short chats and long generations, shared
system prompts and LoRA adapters, so every policy in a comparison replays the very same traffic."""

from __future__ import annotations

import random
from dataclasses import dataclass, field


@dataclass(frozen=True, slots=True)
class TraceRequest:
    at_s: float  # arrival offset from the start of the run
    kind: str  # "chat" | "long" | "huge" (a long-context streamed chat)
    model: str
    messages: tuple[tuple[str, str], ...]
    max_tokens: int
    system_id: int  # which shared system prompt (-1: none)
    stream: bool = True  # chats stream (TTFT is what users feel); long batch generations need not

    def body(self) -> dict[str, object]:
        body: dict[str, object] = {
            "model": self.model,
            "messages": [{"role": r, "content": c} for r, c in self.messages],
            "max_tokens": self.max_tokens,
            "stream": self.stream,
        }
        if self.stream:
            body["stream_options"] = {"include_usage": True}
        return body


@dataclass(slots=True)
class TraceSpec:
    duration_s: float = 60.0
    base_rps: float = 4.0
    burst_every_s: float = 20.0
    burst_len_s: float = 4.0
    burst_factor: float = 5.0  # rate multiplier inside a burst
    long_fraction: float = 0.2
    chat_output: tuple[int, int] = (40, 200)
    long_output: tuple[int, int] = (600, 1200)
    system_prompts: int = 4
    system_prompt_tokens: int = 800
    user_tokens: tuple[int, int] = (40, 400)
    base_model: str = "meta-llama/Llama-3.1-8B-Instruct"
    adapters: tuple[str, ...] = ()
    adapter_fraction: float = 0.0
    stream_long: bool = False  # long generations as non-streaming batch calls
    # > system_prompt_tokens: each shared system prompt's length is drawn in [system_prompt_tokens, this]
    system_prompt_tokens_max: int = 0
    # long-context requests (streamed chats whose user turn is a whole document), drawn from their
    # own random stream so every other request of the trace is the same with or without them
    huge_fraction: float = 0.0
    huge_tokens: tuple[int, int] = (16_000, 32_000)
    huge_output: tuple[int, int] = (100, 300)
    seed: int = 7
    extra: dict[str, float] = field(default_factory=dict)


_WORDS = [
    "the",
    "gpu",
    "cache",
    "token",
    "model",
    "server",
    "request",
    "queue",
    "latency",
    "prompt",
    "answer",
    "system",
    "user",
    "batch",
    "route",
    "cluster",
    "region",
    "adapter",
    "memory",
    "decode",
    "prefill",
    "stream",
    "chunk",
    "budget",
    "shard",
    "replica",
]


def _text(rng: random.Random, tokens: int) -> str:
    # ~4 characters per token (common.tokens): words average ~5 chars + a space.
    out: list[str] = []
    n = 0
    while n < tokens * 4:
        w = rng.choice(_WORDS)
        out.append(w)
        n += len(w) + 1
    return " ".join(out)


def _system_tokens(spec: TraceSpec, rng: random.Random) -> int:
    if spec.system_prompt_tokens_max > spec.system_prompt_tokens:
        return rng.randint(spec.system_prompt_tokens, spec.system_prompt_tokens_max)
    return spec.system_prompt_tokens


def _rate_at(spec: TraceSpec, t: float) -> float:
    in_burst = spec.burst_every_s > 0 and (t % spec.burst_every_s) >= spec.burst_every_s - spec.burst_len_s
    return spec.base_rps * (spec.burst_factor if in_burst else 1.0)


def generate(spec: TraceSpec) -> list[TraceRequest]:
    """Non-homogeneous Poisson arrivals by thinning, deterministic for a given spec."""
    rng = random.Random(spec.seed)
    # the scenario extensions draw from their own streams: a spec without them keeps its trace
    lengths = random.Random(spec.seed + 1)
    huge_rng = random.Random(spec.seed + 2)
    systems = [
        f"You are assistant #{i}. " + _text(rng, _system_tokens(spec, lengths))
        for i in range(spec.system_prompts)
    ]
    peak = spec.base_rps * max(1.0, spec.burst_factor)
    out: list[TraceRequest] = []
    t = 0.0
    while True:
        t += rng.expovariate(peak)
        if t >= spec.duration_s:
            break
        if rng.random() > _rate_at(spec, t) / peak:
            continue
        long = rng.random() < spec.long_fraction
        lo, hi = spec.long_output if long else spec.chat_output
        huge = spec.huge_fraction > 0 and huge_rng.random() < spec.huge_fraction
        model = spec.base_model
        if spec.adapters and rng.random() < spec.adapter_fraction:
            model = rng.choice(spec.adapters)
        sid = rng.randrange(len(systems)) if systems else -1
        msgs: list[tuple[str, str]] = []
        if sid >= 0:
            msgs.append(("system", systems[sid]))
        msgs.append(("user", _text(rng, rng.randint(*spec.user_tokens))))
        max_tokens = rng.randint(lo, hi)
        kind = "long" if long else "chat"
        if huge:  # a document to read: streamed, its user turn replaced by the long context
            msgs[-1] = ("user", _text(huge_rng, huge_rng.randint(*spec.huge_tokens)))
            kind, long, max_tokens = "huge", False, huge_rng.randint(*spec.huge_output)
        out.append(
            TraceRequest(
                at_s=t,
                kind=kind,
                model=model,
                messages=tuple(msgs),
                max_tokens=max_tokens,
                system_id=sid,
                stream=not long or spec.stream_long,
            )
        )
    return out
