"""Counters and histograms an engine records; the metrics renderers read them."""

from __future__ import annotations

from dataclasses import dataclass, field

from modelsim.histogram import ITL_BOUNDS, LATENCY_BOUNDS, TTFT_BOUNDS, Histogram, token_bounds


@dataclass
class EngineStats:
    max_model_len: int
    prompt_tokens_total: int = 0
    generation_tokens_total: int = 0
    success_by_reason: dict[str, int] = field(default_factory=lambda: {"stop": 0, "length": 0, "abort": 0})
    prefix_queries_total: int = 0
    prefix_hits_total: int = 0
    preemptions_total: int = 0
    steps_total: int = 0
    busy_seconds_total: float = 0.0
    version: int = 0  # bumps on every observation: renderers cache the histogram text per version
    ttft: Histogram = field(init=False)
    itl: Histogram = field(init=False)
    e2e: Histogram = field(init=False)
    queue_time: Histogram = field(init=False)
    prefill_time: Histogram = field(init=False)
    decode_time: Histogram = field(init=False)
    inference_time: Histogram = field(init=False)
    prompt_len: Histogram = field(init=False)
    generation_len: Histogram = field(init=False)
    max_tokens_param: Histogram = field(init=False)
    iteration_tokens: Histogram = field(init=False)

    def __post_init__(self) -> None:
        tb = token_bounds(self.max_model_len)
        self.ttft = Histogram(TTFT_BOUNDS)
        self.itl = Histogram(ITL_BOUNDS)
        self.e2e = Histogram(LATENCY_BOUNDS)
        self.queue_time = Histogram(LATENCY_BOUNDS)
        self.prefill_time = Histogram(LATENCY_BOUNDS)
        self.decode_time = Histogram(LATENCY_BOUNDS)
        self.inference_time = Histogram(LATENCY_BOUNDS)
        self.prompt_len = Histogram(tb)
        self.generation_len = Histogram(tb)
        self.max_tokens_param = Histogram(tb)
        self.iteration_tokens = Histogram(
            (1.0, 8.0, 16.0, 32.0, 64.0, 128.0, 256.0, 512.0, 1024.0, 2048.0, 4096.0, 8192.0, 16384.0)
        )

    @property
    def success_total(self) -> int:
        return sum(self.success_by_reason.values())
