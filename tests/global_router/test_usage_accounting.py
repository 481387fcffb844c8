"""Real usage for reconciling reservations: response `usage`, the streamed usage chunk, or chunk counts."""

from __future__ import annotations

from global_router.ratelimit import reservation_tokens
from global_router.usage import StreamUsage


def test_reservation_is_prompt_plus_max_tokens_or_default() -> None:
    assert reservation_tokens(100, 50, 256) == 150
    assert reservation_tokens(100, None, 256) == 356


def test_non_streaming_usage() -> None:
    assert _body_total(b'{"usage": {"prompt_tokens": 3, "completion_tokens": 4, "total_tokens": 7}}') == 7
    assert _body_total(b'{"usage": {"prompt_tokens": 3, "completion_tokens": 4}}') == 7
    assert _body_total(b'{"choices": []}') is None
    assert _body_total(b"not json") is None
    split = StreamUsage()
    split.read_body(b'{"usage": {"prompt_tokens": 3, "completion_tokens": 4, "total_tokens": 7}}')
    assert (split.prompt, split.completion, split.total(100)) == (3, 4, 7)
    assert StreamUsage().total(100) == 100  # nothing reported: the prompt estimate


def test_stream_usage_chunk_wins_even_when_split_across_reads() -> None:
    stream = (
        b'data: {"choices":[{"delta":{"content":"a"}}],"usage":null}\n\n'
        b'data: {"choices":[{"delta":{"content":"b"}}],"usage":null}\n\n'
        b'data: {"choices":[],"usage":{"prompt_tokens":10,"completion_tokens":2,"total_tokens":12}}\n\n'
        b"data: [DONE]\n\n"
    )
    u = StreamUsage()
    for i in range(0, len(stream), 7):  # arbitrary TCP-ish fragmentation
        u.feed(stream[i : i + 7])
    assert u.reported == 12 and u.chunks == 2
    assert u.total(prompt_tokens=999) == 12


def test_stream_without_usage_counts_content_chunks() -> None:
    u = StreamUsage()
    u.feed(
        b'data: {"choices":[{"text":"x"}]}\n\ndata: {"choices":[{"text":"y"}]}\n\n: keepalive\n\ndata: [DONE]\n\n'
    )
    assert u.reported is None and u.total(prompt_tokens=5) == 7


def _body_total(body: bytes) -> int | None:
    usage = StreamUsage()
    usage.read_body(body)
    return usage.reported


def _line_by_line(stream: bytes) -> StreamUsage:
    """The reference: every complete line through the slow path."""
    usage = StreamUsage()
    for line in stream.split(b"\n")[:-1]:
        usage._line(line)
    return usage


def test_the_fast_count_agrees_with_the_line_by_line_path_however_the_stream_is_cut() -> None:
    import random

    chunk = b'data: {"id":"c1","object":"chat.completion.chunk","choices":[{"index":0,"delta":{"content":"%s"}}]}\n\n'
    parts = [chunk % b"tok" for _ in range(20)]
    parts.insert(5, chunk % b"data: quoted")  # `data:` inside content: the slow path, same count
    parts.insert(9, b": keep-alive comment\n\nevent: ping\n\n")
    parts.append(
        b'data: {"choices":[],"usage":{"prompt_tokens":5,"completion_tokens":21,"total_tokens":26}}\n\n'
    )
    parts.append(b"data: [DONE]\n\n")
    stream = b"".join(parts)
    want = _line_by_line(stream)
    assert want.chunks == 21 and want.reported == 26
    rng = random.Random(7)
    for _ in range(200):
        cuts = sorted(rng.sample(range(1, len(stream)), rng.randint(1, 40)))
        got = StreamUsage()
        for a, b in zip([0, *cuts], [*cuts, len(stream)], strict=True):
            got.feed(stream[a:b])
        assert (got.chunks, got.reported, got.prompt, got.completion) == (
            want.chunks,
            want.reported,
            want.prompt,
            want.completion,
        ), cuts
    without_usage = StreamUsage()
    without_usage.feed(b"".join(parts[:-2]))
    assert without_usage.chunks == 21 and without_usage.total(5) == 26
