"""Every calibrated hardware profile lands inside the published or derived figures it cites."""

from __future__ import annotations

import pytest

from modelsim.profiles import METRICS, REFERENCES, get_profile


def _figures(name: str) -> dict[str, float]:
    p = get_profile(name)
    return {
        "itl_b1_ms": 1e3 * p.expected_itl_s(1, 1),
        "prefill_tok_s": p.expected_prefill_tok_s(),
        "kv_tokens": p.num_gpu_blocks * p.block_size,
        "max_num_seqs": p.max_num_seqs,
        "max_num_batched_tokens": p.max_num_batched_tokens,
    }


@pytest.mark.parametrize("name", sorted(REFERENCES))
def test_profile_figures_are_within_their_references(name: str) -> None:
    figures = _figures(name)
    refs = REFERENCES[name]
    assert {r.metric for r in refs} == set(METRICS)
    for r in refs:
        assert r.source and r.kind in ("vendor", "vLLM source", "arithmetic", "estimate")
        assert r.low <= figures[r.metric] <= r.high, (r.metric, figures[r.metric], r)


def test_vllm_batch_defaults_follow_the_gpu_class() -> None:
    # vLLM's get_batch_defaults: >= 70 GiB and not an A100 -> 1024 / 8192, else 256 / 2048.
    assert (
        get_profile("h100-llama3-8b").max_num_seqs,
        get_profile("h100-llama3-8b").max_num_batched_tokens,
    ) == (
        1024,
        8192,
    )
    for name in ("a100-llama3-8b", "l4-llama3-8b"):
        assert (get_profile(name).max_num_seqs, get_profile(name).max_num_batched_tokens) == (256, 2048)
