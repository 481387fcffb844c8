"""Bytes per block of the approximate prefix index, measured with tracemalloc under churn.

1,000 pods; prompts as in `pick_bench` (60% share one of 8 ~2 KB system prompts, the rest unique,
a user turn after it), each dispatched to a random pod, until the index has taken twice its block
budget: it is full and evicting, with shared prefixes held by many pods (tuples and sets of
holders) and single-holder tails. Everything the index keeps alive is counted (hash ints included).
"""

from __future__ import annotations

import gc
import random
import tracemalloc
from dataclasses import dataclass

from cluster_gateway.scheduling.prefix_index import BYTES_PER_BLOCK, PrefixIndex, block_hashes


@dataclass
class MemoryRow:
    pods: int
    budget_blocks: int
    blocks: int
    traced_bytes: int

    @property
    def bytes_per_block(self) -> float:
        return self.traced_bytes / max(1, self.blocks)


def measure(pods: int = 1000, budget_blocks: int = 200_000, seed: int = 1) -> MemoryRow:
    rng = random.Random(seed)
    systems = [f"<|system|>You are assistant #{k}. " + "Follow the policy carefully. " * 70 for k in range(8)]
    names = [f"pod-{i}" for i in range(pods)]
    gc.collect()
    tracemalloc.start()
    before = tracemalloc.get_traced_memory()[0]
    idx = PrefixIndex(max_blocks_per_pod=50_000, max_total_blocks=budget_blocks)
    added = 0
    i = 0
    while added < 2 * budget_blocks:
        user = f"<|user|>question {i}: " + "lorem ipsum dolor sit amet " * rng.randint(2, 40)
        prompt = rng.choice(systems) + user if rng.random() < 0.6 else user
        hashes = block_hashes(prompt, 64, 256)
        idx.add(rng.choice(names), hashes)
        added += len(hashes)
        i += 1
    del hashes, prompt, user
    gc.collect()
    traced = tracemalloc.get_traced_memory()[0] - before
    tracemalloc.stop()
    return MemoryRow(pods, budget_blocks, idx.total_blocks(), traced)


def table(rows: list[MemoryRow]) -> str:
    lines = [
        "| pods | budget blocks | blocks held | traced MB | bytes / block (measured) | bytes / block (budget constant) |",
        "| ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    lines += [
        f"| {r.pods} | {r.budget_blocks} | {r.blocks} | {r.traced_bytes / 1e6:.1f} | {r.bytes_per_block:.0f} "
        f"| {BYTES_PER_BLOCK} |"
        for r in rows
    ]
    return "\n".join(lines)


if __name__ == "__main__":
    print(table([measure(100, 50_000), measure(1000, 200_000)]))
