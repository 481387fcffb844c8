"""Hardware profiles: how long one engine step takes on a given GPU + model, from a roofline.

A step of a continuous-batching engine is one forward pass over every token scheduled in it. On
a GPU that pass costs max(read all weights once, compute 2 FLOPs per parameter per token) plus
reading the KV cache of every sequence in the batch (attention is memory-bound), plus a fixed
CPU/launch overhead and a small per-sequence cost (sampling, detokenisation, scheduling). The
constants below are published datasheet and model-card numbers with an efficiency factor, so
decode (small batches: weight-read bound) and prefill (compute bound) both land near figures
measured on vLLM.

Sources (per number, also inline; `REFERENCES` below is what `bench sim-validate` checks against):
- [H100] NVIDIA H100 SXM5 datasheet: HBM3 3.35 TB/s, BF16 dense 989 TFLOPS, 80 GB.
- [A100] NVIDIA A100 80GB SXM datasheet: HBM2e 2,039 GB/s, BF16 dense 312 TFLOPS, 80 GB.
- [L4]   NVIDIA L4 datasheet: GDDR6 300 GB/s, BF16 242 TFLOPS with sparsity (121 dense), 24 GB, 72 W.
- [LLAMA] meta-llama/Llama-3.1-8B config.json: 32 layers, 8 KV heads, head_dim 128, 8.03 B params
          -> BF16 weights 16.06 GB; KV per token = 2 (K,V) * 32 * 8 * 128 * 2 bytes = 128 KiB.
- [VLLM] vLLM V1 `EngineArgs.get_batch_defaults` (vllm/engine/arg_utils.py), OpenAI server: a GPU
          with >= 70 GiB that is not an A100 (H100, H200, MI300X) gets max_num_batched_tokens 8192 and
          max_num_seqs 1024; every other GPU (A100, L4) 2048 and 256. Cache config: block_size 16,
          gpu_memory_utilization 0.9. max_loras defaults to 1 (we default to 4 as the brief asks).
- [ARITH] Bandwidth/memory arithmetic from the rows above: a batch-1 decode step reads every weight
          once (16.06 GB / bandwidth); the KV pool is 0.9 x memory - weights - activations.
- [EST] Estimates, marked as such where used: achievable fraction of datasheet bandwidth (~80%:
          vLLM's decode GEMVs and paged attention typically reach 70-85% of HBM peak) and prefill
          MFU. A chunked-prefill step is a few large GEMMs (M = 2048-8192 tokens) that cuBLAS runs
          at 60-75% of dense peak; attention, norms, activations and sampling bring the end-to-end
          step to ~45% (H100, A100) and ~40% on the L4, whose 72 W cap holds clocks below boost
          under sustained tensor load. The audit of issue 14 found the earlier 22% (H100) and 25%
          (L4) about 2x low. Step overheads (~1-1.5 ms) are CPU scheduling + launch costs of vLLM V1
          with CUDA graphs, also estimates.
- [MEAS] LoRA adapter (rank 16) hot-load ~20-100 ms from host memory (vLLM LoRA docs/issue
          reports; an estimate of the order, not a measured figure of ours).
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
        flops=989e12 * 0.45,  # [H100] 989 TFLOPS at ~45% end-to-end MFU [EST] -> ~27k prefill tok/s
        weight_bytes=LLAMA3_8B_WEIGHT_BYTES,
        params=LLAMA3_8B_PARAMS,
        kv_bytes_per_token=LLAMA3_8B_KV_BYTES_PER_TOKEN,
        kv_capacity_tokens=_kv_tokens(80 * _GB, LLAMA3_8B_WEIGHT_BYTES, 2 * _GB),  # ~414k tokens
        step_overhead_s=0.0010,  # [EST] -> ~7 ms decode step at batch 1 (4.8 ms weight-read floor [ARITH])
        per_seq_s=0.00002,  # [EST]
        max_num_seqs=1024,  # [VLLM] >= 70 GiB, not an A100
        max_num_batched_tokens=8192,  # [VLLM] >= 70 GiB, not an A100
        max_model_len=131072,  # [LLAMA] 128k context
        lora_load_s=0.030,  # [MEAS] order of magnitude
    )
)
register(
    HardwareProfile(
        name="a100-llama3-8b",
        gpu="A100-SXM-80GB",
        mem_bandwidth=2.039e12 * 0.8,  # [A100] -> 9.8 ms weight read
        flops=312e12 * 0.45,  # [A100] ~45% end-to-end MFU [EST] -> ~8.5k prefill tok/s (2048-token chunks)
        weight_bytes=LLAMA3_8B_WEIGHT_BYTES,
        params=LLAMA3_8B_PARAMS,
        kv_bytes_per_token=LLAMA3_8B_KV_BYTES_PER_TOKEN,
        kv_capacity_tokens=_kv_tokens(80 * _GB, LLAMA3_8B_WEIGHT_BYTES, 2 * _GB),
        step_overhead_s=0.0012,  # [EST] -> ~11 ms decode step at batch 1 (7.9 ms floor [ARITH])
        per_seq_s=0.00003,  # [EST]
        max_num_seqs=256,  # [VLLM] A100s are excluded from the large defaults
        max_num_batched_tokens=2048,  # [VLLM]
        max_model_len=131072,  # [LLAMA]
        lora_load_s=0.045,  # [MEAS] order of magnitude
    )
)
register(
    HardwareProfile(
        name="l4-llama3-8b",
        gpu="L4-24GB",
        mem_bandwidth=300e9 * 0.8,  # [L4] -> 67 ms weight read: slow decode
        flops=121e12 * 0.40,  # [L4] 121 dense TFLOPS at ~40% MFU [EST: 72 W cap] -> ~3k prefill tok/s
        weight_bytes=LLAMA3_8B_WEIGHT_BYTES,
        params=LLAMA3_8B_PARAMS,
        kv_bytes_per_token=LLAMA3_8B_KV_BYTES_PER_TOKEN,
        kv_capacity_tokens=_kv_tokens(24 * _GB, LLAMA3_8B_WEIGHT_BYTES, 1 * _GB),  # ~34k tokens
        step_overhead_s=0.0015,  # [EST]
        per_seq_s=0.00004,  # [EST]
        max_num_seqs=256,  # [VLLM] < 70 GiB (was 64, an unsourced cap: scenarios that want it set it)
        max_num_batched_tokens=2048,  # [VLLM]
        max_model_len=16384,  # operator's --max-model-len: vLLM refuses 128k when the pool holds ~34k
        lora_load_s=0.120,  # [EST] PCIe-attached, slower host copies than the SXM parts
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


@dataclass(frozen=True, slots=True)
class Reference:
    """A published (or derived) figure a profile should reproduce, with where it comes from."""

    metric: str  # one of METRICS
    low: float
    high: float
    source: str
    kind: str  # "vendor", "vLLM source", "arithmetic" or "estimate"


METRICS = {
    "itl_b1_ms": "decode ITL, batch 1 (ms)",
    "prefill_tok_s": "prefill, one full chunk (tok/s)",
    "kv_tokens": "KV pool (tokens)",
    "max_num_seqs": "max_num_seqs",
    "max_num_batched_tokens": "max_num_batched_tokens",
}


def _refs(
    weights_floor_ms: float,
    itl: tuple[float, float],
    peak_tok_s: float,
    mfu: tuple[float, float],
    kv: tuple[float, float],
    seqs: int,
    batched: int,
    gpu: str,
    large: bool,
) -> tuple[Reference, ...]:
    branch = ">= 70 GiB, not A100" if large else "other GPUs"
    return (
        Reference(
            "itl_b1_ms", *itl, f"16.06 GB weights / {gpu} bandwidth = {weights_floor_ms:.1f} ms floor; "
            "+70-85% achievable bandwidth and ~1 ms step overhead", "arithmetic",
        ),
        Reference(
            "prefill_tok_s", peak_tok_s * mfu[0], peak_tok_s * mfu[1],
            f"{gpu} dense BF16 peak / (2 x 8.03e9 FLOP/token) = {peak_tok_s / 1000:.1f}k tok/s "
            f"at {mfu[0]:.0%}-{mfu[1]:.0%} end-to-end MFU", "estimate",
        ),
        Reference("kv_tokens", *kv, "(0.9 x memory - 16.06 GB - activations) / 128 KiB, GB or GiB reading", "arithmetic"),
        Reference("max_num_seqs", seqs, seqs, f"vLLM EngineArgs.get_batch_defaults, OpenAI server, {branch}", "vLLM source"),
        Reference(
            "max_num_batched_tokens", batched, batched,
            f"vLLM EngineArgs.get_batch_defaults, OpenAI server, {branch}", "vLLM source",
        ),
    )  # fmt: skip


REFERENCES: dict[str, tuple[Reference, ...]] = {
    "h100-llama3-8b": _refs(
        4.8, (5.5, 8.0), 989e12 / 1.606e10, (0.40, 0.55), (400e3, 460e3), 1024, 8192, "H100", True
    ),
    "a100-llama3-8b": _refs(
        7.9, (8.8, 12.0), 312e12 / 1.606e10, (0.40, 0.55), (400e3, 460e3), 256, 2048, "A100", False
    ),
    "l4-llama3-8b": _refs(
        53.5, (58.0, 75.0), 121e12 / 1.606e10, (0.35, 0.50), (30e3, 37e3), 256, 2048, "L4", False
    ),
}


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
