"""Each engine's /metrics body maps onto PodMetrics; the engine is recognised from the body."""

from __future__ import annotations

import pytest

from bench.promtext_bench import vllm_metrics_body
from cluster_gateway.metrics.engines import ENGINES, MetricsMappingError, detect_engine, read_pod_metrics
from tests.cluster_gateway.metrics.bodies import (
    LoraInfo,
    ModelLoad,
    VllmState,
    sglang_body,
    tgi_body,
    vllm_body,
)


def test_vllm_signals_map_onto_pod_metrics() -> None:
    body = vllm_body(
        VllmState(
            models={"llama": ModelLoad(waiting=4, running=9, kv=0.625)},
            lora=[LoraInfo(running="sql-lora, chat-lora", waiting="", max_lora=4, timestamp=1_700_000_100.0)],
            block_size=16,
            num_gpu_blocks="27910",
            prefix_hits=250,
            prefix_queries=1000,
        )
    )
    m = read_pod_metrics(body, "vllm", scraped_at=12.5)
    assert (m.engine, m.waiting, m.running, m.kv_usage) == ("vllm", 4, 9, 0.625)
    assert m.running_adapters == {"sql-lora", "chat-lora"} and m.waiting_adapters == frozenset()
    assert m.max_lora == 4 and (m.block_size, m.num_gpu_blocks) == (16, 27910)
    assert m.prefix_cache_hit_rate == pytest.approx(0.25) and m.scraped_at == 12.5
    assert m.batch_max_tokens is None


def test_vllm_sums_over_model_names_and_ranks_and_averages_kv() -> None:
    state = VllmState(
        models={"base": ModelLoad(2, 6, 0.5), "alias": ModelLoad(3, 1, 0.7)}, engines=2, num_gpu_blocks="1000"
    )
    m = read_pod_metrics(vllm_body(state), "vllm", scraped_at=0.0)
    assert (m.waiting, m.running) == (5, 7)
    assert m.kv_usage == pytest.approx(0.6)
    assert m.num_gpu_blocks == 2000  # two ranks' caches


def test_vllm_newest_lora_sample_wins() -> None:
    state = VllmState(
        lora=[
            LoraInfo(running="old-a", waiting="old-b", max_lora=2, timestamp=1_700_000_000.0),
            LoraInfo(running="new-a,new-b", waiting="queued", max_lora=3, timestamp=1_700_000_500.0),
            LoraInfo(running="older", waiting="", max_lora=1, timestamp=1_600_000_000.0),
        ]
    )
    m = read_pod_metrics(vllm_body(state), "vllm", scraped_at=0.0)
    assert m.running_adapters == {"new-a", "new-b"} and m.waiting_adapters == {"queued"} and m.max_lora == 3


def test_vllm_older_metric_names_are_understood() -> None:
    state = VllmState(
        models={"m": ModelLoad(1, 2, 0.33)}, legacy_names=True, prefix_hits=10, prefix_queries=40
    )
    m = read_pod_metrics(vllm_body(state), "vllm", scraped_at=0.0)
    assert m.kv_usage == pytest.approx(0.33) and m.prefix_cache_hit_rate == pytest.approx(0.25)


def test_vllm_unknown_block_count_and_no_lora_metric() -> None:
    m = read_pod_metrics(
        vllm_body(VllmState(num_gpu_blocks="None", prefix_queries=0, prefix_hits=0)), None, 0.0
    )
    assert m.num_gpu_blocks is None and m.block_size == 16
    assert m.running_adapters == frozenset() and m.max_lora == 0
    assert m.prefix_cache_hit_rate is None  # no query answered yet


def test_the_benchmark_body_maps_like_its_full_parse() -> None:
    body = vllm_metrics_body(models=["a", "b"], engines=2, running_adapters="x,y", seed=4)
    m = read_pod_metrics(body, None, 0.0)
    assert m.engine == "vllm" and m.running_adapters == {"x", "y"} and m.max_lora == 4
    assert 0.0 <= (m.kv_usage or 0.0) <= 1.0 and m.block_size == 16 and m.num_gpu_blocks == 2 * 27910


def test_sglang_signals_map_onto_pod_metrics() -> None:
    body = sglang_body({"qwen": ModelLoad(6, 12, 0.875), "qwen-alias": ModelLoad(1, 0, 0.875)}, page_size=16)
    m = read_pod_metrics(body, "sglang", scraped_at=3.0)
    assert (m.engine, m.waiting, m.running) == ("sglang", 7, 12)
    assert m.kv_usage == pytest.approx(0.875) and m.prefix_cache_hit_rate == pytest.approx(0.25)
    assert (m.block_size, m.num_gpu_blocks) == (16, 500_000)
    assert m.running_adapters == frozenset()


def test_tgi_has_queue_and_batch_but_no_kv() -> None:
    m = read_pod_metrics(tgi_body(queue=3, batch=8, max_tokens=20_000), "tgi", scraped_at=1.0)
    assert (m.engine, m.waiting, m.running, m.batch_max_tokens) == ("tgi", 3, 8, 20_000)
    assert m.kv_usage is None and m.running_adapters == frozenset() and m.block_size is None
    assert read_pod_metrics(tgi_body(0, 0, max_tokens=None), "tgi", 0.0).batch_max_tokens is None


@pytest.mark.parametrize(
    ("body", "engine"),
    [
        (vllm_body(), "vllm"),
        (vllm_body(VllmState(legacy_names=True)), "vllm"),
        (sglang_body({"m": ModelLoad(0, 0, 0.0)}), "sglang"),
        (tgi_body(0, 0), "tgi"),
        (b"# TYPE up gauge\nup 1\n", None),
        (b"", None),
    ],
)
def test_engine_is_detected_from_the_body(body: bytes, engine: str | None) -> None:
    assert detect_engine(body) == engine
    if engine is not None:
        assert read_pod_metrics(body, None, 0.0).engine == engine


def test_unusable_bodies_raise_clear_errors() -> None:
    with pytest.raises(MetricsMappingError, match="no vLLM, SGLang or TGI"):
        read_pod_metrics(b"up 1\n", None, 0.0)
    with pytest.raises(MetricsMappingError, match="vllm:num_requests_waiting missing"):
        read_pod_metrics(tgi_body(1, 1), "vllm", 0.0)  # misconfigured engine
    with pytest.raises(MetricsMappingError, match="unusable value"):
        read_pod_metrics(b"tgi_queue_size NaN\ntgi_batch_current_size 1\n", "tgi", 0.0)
    with pytest.raises(ValueError):
        read_pod_metrics(b'vllm:num_requests_waiting{model_name="x} 1\n', "vllm", 0.0)


def test_registry_has_every_engine_with_disjoint_signatures() -> None:
    assert set(ENGINES) == {"vllm", "sglang", "tgi"}
    signatures = [m.signature for m in ENGINES.values()]
    assert all(s <= m.wanted for s, m in zip(signatures, ENGINES.values(), strict=True))
    assert not set.intersection(*(set(s) for s in signatures))
