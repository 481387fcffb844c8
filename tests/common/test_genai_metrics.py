"""Token usage is read from a body's tail; the fast histogram renders like prometheus_client's."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Histogram, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from common.fast_metrics import FastCounter, FastHistogram
from common.genai_metrics import LabelCap, operation_name, usage_from_tail


def test_usage_from_a_json_body_and_from_a_stream_tail() -> None:
    body = (
        b'{"id":"x","choices":[{"index":0,"message":{"content":"hi"}}],'
        b'"usage":{"prompt_tokens":17,"total_tokens":25,"completion_tokens":8,'
        b'"prompt_tokens_details":{"cached_tokens":16}}}'
    )
    assert usage_from_tail(body) == (17, 8)
    stream = (
        b'data: {"choices":[{"delta":{"content":"a"}}],"usage":null}\n\n'
        b'data: {"choices":[],"usage":{"prompt_tokens":3,"completion_tokens":2,"total_tokens":5}}\n\n'
        b"data: [DONE]\n\n"
    )
    assert usage_from_tail(stream) == (3, 2)
    assert usage_from_tail(b'data: {"choices":[{"delta":{"content":"a"}}]}\n\ndata: [DONE]\n\n') is None
    # a nested detail object must not lend its fields to the top level
    assert usage_from_tail(b'"usage":{"completion_tokens":4,"x":{"prompt_tokens":9}}') is None


def test_operation_names_follow_the_conventions() -> None:
    assert operation_name("/v1/chat/completions") == "chat"
    assert operation_name("/v1/completions") == "text_completion"


def test_label_cap_bounds_client_chosen_values() -> None:
    cap = LabelCap(limit=2)
    assert [cap.value(v) for v in ("a", "b", "c", "a")] == ["a", "b", "other", "a"]


def test_fast_histogram_and_counter_render_as_prometheus_client_would() -> None:
    buckets = (0.1, 1.0, 10.0)
    ours, theirs = CollectorRegistry(), CollectorRegistry()
    fast = FastHistogram("lat_seconds", "latency", ["m"], buckets, registry=ours)
    ref = Histogram("lat_seconds", "latency", ["m"], buckets=buckets, registry=theirs)
    for v in (0.05, 0.1, 0.5, 3.0, 99.0):
        fast.labels("a").observe(v)
        ref.labels("a").observe(v)

    def samples(r: CollectorRegistry) -> set[tuple[str, tuple[tuple[str, str], ...], float]]:
        return {
            (s.name, tuple(sorted(s.labels.items())), s.value)
            for f in text_string_to_metric_families(generate_latest(r).decode())
            for s in f.samples
            if not s.name.endswith("_created")
        }

    assert samples(ours) == samples(theirs)
    counter = FastCounter("tokens", "tokens", ["pod"], registry=ours)
    counter.inc(("p1",), 5)
    counter.inc(("p1",), 2)
    counter.inc(("p2",), 1)
    assert counter.retain("pod", lambda p: p == "p1") == 1
    got = {
        s.name: s.value
        for f in text_string_to_metric_families(generate_latest(ours).decode())
        for s in f.samples
        if s.name.startswith("tokens")
    }
    assert got == {"tokens_total": 7.0}
