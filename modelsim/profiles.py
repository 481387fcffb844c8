"""Hardware profiles: how long one engine step takes on a given GPU + model, from a roofline.

A step of a continuous-batching engine is one forward pass over every token scheduled in it. On
a GPU that pass costs max(read all weights once, compute 2 FLOPs per parameter per token) plus
reading the KV cache of every sequence in the batch (attention is memory-bound), plus a fixed
CPU/launch overhead and a small per-sequence cost (sampling, detokenisation, scheduling). The
constants below are published datasheet and model-card numbers with an efficiency factor, so
decode (small batches: weight-read bound) and prefill (compute bound) both land near figures
measured on vLLM.

Sources (per number, also inline):
- [H100] NVIDIA H100 SXM5 datasheet: HBM3 3.35 TB/s, BF16 dense 989 TFLOPS, 80 GB.
- [A100] NVIDIA A100 80GB SXM datasheet: HBM2e 2,039 GB/s, BF16 dense 312 TFLOPS, 80 GB.
- [L4]   NVIDIA L4 datasheet: GDDR6 300 GB/s, BF16 242 TFLOPS with sparsity (121 dense), 24 GB.
- [LLAMA] meta-llama/Llama-3.1-8B config.json: 32 layers, 8 KV heads, head_dim 128, 8.03 B params
          -> BF16 weights 16.06 GB; KV per token = 2 (K,V) * 32 * 8 * 128 * 2 bytes = 128 KiB.
- [VLLM] vLLM engine args defaults: block_size 16, gpu_memory_utilization 0.9, max_num_seqs 256,
          max_num_batched_tokens 8192 (H100-class) / 2048 (others) for the OpenAI server with
          chunked prefill, max_loras 1 (we default to 4 as the brief asks).
- [MEAS] Public vLLM benchmarks of Llama-3-8B BF16 (vLLM perf dashboard, Anyscale/Databricks
          blog posts): H100 decode ITL ~6-8 ms at batch 1, prefill ~10-15k tok/s; A100 ~11-13 ms;
          LoRA adapter (rank 16) hot-load ~20-100 ms from host memory.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

BLOCK_SIZE = 16  # [VLLM] tokens per KV block
LLAMA3_8B_PARAMS = 8.03e9  # [LLAMA]
LLAMA3_8B_WEIGHT_BYTES = 2 * LLAMA3_8B_PARAMS  # [LLAMA] BF16
LLAMA3_8B_KV_BYTES_PER_TOKEN = 2 * 32 * 8 * 128 * 2  # [LLAMA] = 131072 = 128 KiB


@dataclass(frozen=True, slots=True)
class HardwareProfile:
    """A GPU + model pairing. All times in seconds at time_scale 1."""

    name: str
    gpu: str
    mem_bandwidth: float  # effective bytes/s (datasheet * efficiency)
    flops: float  # effective FLOP/s for dense GEMMs (datasheet * MFU)
    weight_bytes: float
    params: float
    kv_bytes_per_token: int
    kv_capacity_tokens: int  # what fits after weights and activations at 0.9 utilisation
    step_overhead_s: float  # CPU scheduling + kernel launches per step
    per_seq_s: float  # sampling/detokenise/bookkeeping per sequence per step
    max_num_seqs: int
    max_num_batched_tokens: int
    max_model_len: int
    lora_load_s: float
    output_len_median: int = 200  # when max_tokens is absent: lognormal around this
    output_len_sigma: float = 0.6
    output_len_cap: int = 1024
    block_size: int = BLOCK_SIZE

    @property
    def num_gpu_blocks(self) -> int:
        return max(1, self.kv_capacity_tokens // self.block_size)

    def step_seconds(self, num_seqs: int, num_tokens: int, context_tokens: int) -> float:
        """Duration of one forward pass with `num_tokens` scheduled over `num_seqs` sequences
        whose attention reads `context_tokens` of KV in total."""
        if num_seqs == 0:
            return 0.0
        weights = self.weight_bytes / self.mem_bandwidth
        compute = 2.0 * self.params * num_tokens / self.flops
        kv_read = self.kv_bytes_per_token * context_tokens / self.mem_bandwidth
        return self.step_overhead_s + self.per_seq_s * num_seqs + max(weights, compute) + kv_read

    # Figures the validation bench prints next to its measurements.
    def expected_itl_s(self, batch: int, context: int) -> float:
        return self.step_seconds(batch, batch, batch * context)

    def expected_prefill_tok_s(self) -> float:
        n = self.max_num_batched_tokens
        return n / self.step_seconds(1, n, n)

    def expected_ttft_s(self, prompt_tokens: int) -> float:
        """Unloaded TTFT: chunked prefill of the prompt, first token sampled in the last chunk."""
        left, t, done = prompt_tokens, 0.0, 0
        while left > 0:
            n = min(left, self.max_num_batched_tokens)
            done += n
            t += self.step_seconds(1, n, done)
            left -= n
        return t


def _kv_tokens(hbm_bytes: float, weight_bytes: float, activation_bytes: float) -> int:
    """[VLLM] KV pool = gpu_memory_utilization * HBM - weights - activation peak, in tokens."""
    free = 0.9 * hbm_bytes - weight_bytes - activation_bytes
    return int(free // LLAMA3_8B_KV_BYTES_PER_TOKEN)


_GB = 1e9

PROFILES: dict[str, HardwareProfile] = {}


def register(profile: HardwareProfile) -> HardwareProfile:
    PROFILES[profile.name] = profile
    return profile


register(
    HardwareProfile(
        name="h100-llama3-8b",
        gpu="H100-SXM-80GB",
        mem_bandwidth=3.35e12 * 0.8,  # [H100] 3.35 TB/s at ~80% achievable -> 6.0 ms weight read
        flops=989e12 * 0.22,  # [H100] 989 TFLOPS at ~22% end-to-end MFU -> ~13.5k prefill tok/s [MEAS]
        weight_bytes=LLAMA3_8B_WEIGHT_BYTES,
        params=LLAMA3_8B_PARAMS,
        kv_bytes_per_token=LLAMA3_8B_KV_BYTES_PER_TOKEN,
        kv_capacity_tokens=_kv_tokens(80 * _GB, LLAMA3_8B_WEIGHT_BYTES, 2 * _GB),  # ~414k tokens
        step_overhead_s=0.0010,  # -> ~7 ms decode step at batch 1 [MEAS]
        per_seq_s=0.00002,
        max_num_seqs=256,  # [VLLM]
        max_num_batched_tokens=8192,  # [VLLM] H100-class default
        max_model_len=131072,  # [LLAMA] 128k context
        lora_load_s=0.030,  # [MEAS]
    )
)
register(
    HardwareProfile(
        name="a100-llama3-8b",
        gpu="A100-SXM-80GB",
        mem_bandwidth=2.039e12 * 0.8,  # [A100] -> 9.8 ms weight read
        flops=312e12 * 0.3,  # [A100] ~30% end-to-end MFU -> ~5.8k prefill tok/s [MEAS]
        weight_bytes=LLAMA3_8B_WEIGHT_BYTES,
        params=LLAMA3_8B_PARAMS,
        kv_bytes_per_token=LLAMA3_8B_KV_BYTES_PER_TOKEN,
        kv_capacity_tokens=_kv_tokens(80 * _GB, LLAMA3_8B_WEIGHT_BYTES, 2 * _GB),
        step_overhead_s=0.0012,  # -> ~11 ms decode step at batch 1 [MEAS]
        per_seq_s=0.00003,
        max_num_seqs=256,
        max_num_batched_tokens=2048,  # [VLLM]
        max_model_len=131072,
        lora_load_s=0.045,
    )
)
register(
    HardwareProfile(
        name="l4-llama3-8b",
        gpu="L4-24GB",
        mem_bandwidth=300e9 * 0.8,  # [L4] -> 67 ms weight read: slow decode
        flops=121e12 * 0.25,  # [L4] 121 dense TFLOPS at ~25% MFU -> ~1.9k prefill tok/s
        weight_bytes=LLAMA3_8B_WEIGHT_BYTES,
        params=LLAMA3_8B_PARAMS,
        kv_bytes_per_token=LLAMA3_8B_KV_BYTES_PER_TOKEN,
        kv_capacity_tokens=_kv_tokens(24 * _GB, LLAMA3_8B_WEIGHT_BYTES, 1 * _GB),  # ~34k tokens
        step_overhead_s=0.0015,
        per_seq_s=0.00004,
        max_num_seqs=64,
        max_num_batched_tokens=2048,
        max_model_len=16384,
        lora_load_s=0.120,
    )
)
# For tests: small KV (64 blocks = 1024 tokens) and a small batch so queueing, KV saturation and
# preemption happen with a handful of requests; steps are a few ms so suites stay fast.
register(
    HardwareProfile(
        name="tiny",
        gpu="test",
        mem_bandwidth=1e12,
        flops=1.6e14,  # 256-token chunks stay weight-read bound: ~5 ms a chunk, ~50k prefill tok/s
        weight_bytes=4e9,  # 4 ms weight read
        params=1e9,
        kv_bytes_per_token=1024,
        kv_capacity_tokens=1024,
        step_overhead_s=0.001,  # ~5 ms decode step
        per_seq_s=0.00005,
        max_num_seqs=8,
        max_num_batched_tokens=256,
        max_model_len=1024,
        lora_load_s=0.080,
        output_len_median=24,
        output_len_sigma=0.5,
        output_len_cap=64,
    )
)


def get_profile(name: str) -> HardwareProfile:
    try:
        return PROFILES[name]
    except KeyError:
        raise ValueError(f"unknown profile {name!r}; known: {', '.join(sorted(PROFILES))}") from None


def with_overrides(
    profile: HardwareProfile,
    *,
    kv_capacity_tokens: int | None = None,
    max_num_seqs: int | None = None,
    max_num_batched_tokens: int | None = None,
    lora_load_s: float | None = None,
) -> HardwareProfile:
    """A copy with test/engine overrides; max_model_len never exceeds the KV pool."""
    changes: dict[str, object] = {}
    if kv_capacity_tokens is not None:
        changes["kv_capacity_tokens"] = kv_capacity_tokens
    if max_num_seqs is not None:
        changes["max_num_seqs"] = max_num_seqs
    if max_num_batched_tokens is not None:
        changes["max_num_batched_tokens"] = max_num_batched_tokens
    if lora_load_s is not None:
        changes["lora_load_s"] = lora_load_s
    p = replace(profile, **changes) if changes else profile  # type: ignore[arg-type]
    kv_tokens = p.num_gpu_blocks * p.block_size
    if p.max_model_len > kv_tokens:
        p = replace(p, max_model_len=kv_tokens)
    return p


def lognormal_mu(median: int) -> float:
    return math.log(max(1, median))
