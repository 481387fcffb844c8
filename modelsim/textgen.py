"""Deterministic filler text: each output token is a 4-character piece, so counting the text with
`common.tokens.count_tokens` gives back the number of tokens generated."""

from __future__ import annotations

import random

_WORDS = [
    "the",
    "and",
    "for",
    "are",
    "but",
    "not",
    "you",
    "all",
    "any",
    "can",
    "had",
    "her",
    "was",
    "one",
    "our",
    "out",
    "day",
    "get",
    "has",
    "him",
    "his",
    "how",
    "man",
    "new",
    "now",
    "old",
    "see",
    "two",
    "way",
    "who",
    "boy",
    "did",
    "its",
    "let",
    "put",
    "say",
    "she",
    "too",
    "use",
    "gpu",
    "kv",
    "ram",
    "lot",
    "map",
    "set",
    "run",
    "top",
    "key",
    "net",
    "bit",
    "log",
    "sum",
    "max",
    "min",
    "row",
    "col",
    "end",
    "art",
    "act",
    "add",
    "age",
    "ago",
    "air",
    "arm",
    "ask",
    "bad",
    "bag",
    "bed",
    "big",
    "box",
    "bus",
    "buy",
]


class FillerText:
    """A seeded ring of tokens; request k reads it from an offset derived from k."""

    def __init__(self, seed: int, size: int = 4096) -> None:
        rng = random.Random(seed)
        self._tokens = [" " + w.ljust(3, "s")[:3] for w in (rng.choice(_WORDS) for _ in range(size))]
        self._size = size

    def tokens(self, request_index: int, start: int, count: int) -> str:
        """Text of output tokens [start, start+count) of the given request."""
        base = (request_index * 7919 + start) % self._size
        toks = self._tokens
        end = base + count
        if end <= self._size:
            return "".join(toks[base:end])
        return "".join(toks[(base + i) % self._size] for i in range(count))
