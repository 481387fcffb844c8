"""OpenTelemetry GenAI semantic-convention metrics in Prometheus form, shared by both tiers.

Why the OTel names: dashboards and alerts written for other LLM gateways (Envoy AI Gateway exports
`gen_ai.client.token.usage` and `gen_ai.server.request.duration`) then work on Fleetgate
unchanged. The conventions' attributes become Prometheus labels with dots turned into
underscores (`gen_ai.request.model` → `gen_ai_request_model`), and a unit of seconds adds the
`_seconds` suffix, as the OpenTelemetry → Prometheus mapping does:

| OTel instrument                      | Prometheus family                               |
| ------------------------------------ | ----------------------------------------------- |
| `gen_ai.server.request.duration`     | `gen_ai_server_request_duration_seconds`        |
| `gen_ai.server.time_to_first_token`  | `gen_ai_server_time_to_first_token_seconds`     |
| `gen_ai.server.time_per_output_token`| `gen_ai_server_time_per_output_token_seconds`   |
| `gen_ai.client.token.usage`          | `gen_ai_client_token_usage` (`gen_ai_token_type` input/output) |

Token counts come from the `usage` object the model server returns (a non-streaming body, or a
stream's usage chunk when the client set `stream_options.include_usage`), read once per request
from the body's tail (`usage_from_tail`), never by parsing chunks as they pass.
"""

from __future__ import annotations

import re

from prometheus_client import disable_created_metrics

from common.openai_request import CHAT_PATH, COMPLETIONS_PATH

# No `<name>_created` sample per counter and histogram child: Prometheus ignores it in the text
# format (without its created-timestamps feature), and it was a quarter of a gateway's lines at
# 1,000 pods. Process-wide: every Fleetgate server's metrics use this module.
disable_created_metrics()

__all__ = [
    "DURATION_BUCKETS",
    "TOKEN_BUCKETS",
    "TPOT_BUCKETS",
    "TTFT_BUCKETS",
    "LabelCap",
    "operation_name",
    "usage_from_tail",
]

# Bucket boundaries the conventions recommend for each instrument.
DURATION_BUCKETS = (0.01, 0.02, 0.04, 0.08, 0.16, 0.32, 0.64, 1.28, 2.56, 5.12, 10.24, 20.48, 40.96, 81.92)
TTFT_BUCKETS = (0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0)
TPOT_BUCKETS = (0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5)
TOKEN_BUCKETS = (1, 4, 16, 64, 256, 1024, 4096, 16384, 65536, 262144, 1048576, 4194304, 16777216, 67108864)

_OPERATIONS = {CHAT_PATH: "chat", COMPLETIONS_PATH: "text_completion"}

# `"usage": {...}` with no nested object inside (OpenAI's usage has only numbers, or nested
# `*_details` objects, which this pattern skips over by taking the innermost-free form below).
_USAGE_RE = re.compile(rb'"usage"\s*:\s*\{((?:[^{}]|\{[^{}]*\})*)\}')
_PROMPT_RE = re.compile(rb'"prompt_tokens"\s*:\s*(\d+)')
_COMPLETION_RE = re.compile(rb'"completion_tokens"\s*:\s*(\d+)')
TAIL_BYTES = 4096  # a usage object sits at the end of a body / stream; this much of the end is read


class LabelCap:
    """At most `limit` distinct values of one label (later new ones read `other`): a label fed from
    requests (a model name) must not grow series without bound."""

    def __init__(self, limit: int = 256) -> None:
        self.limit = limit
        self._seen: set[str] = set()

    def value(self, v: str) -> str:
        if v in self._seen:
            return v
        if len(self._seen) >= self.limit:
            return "other"
        self._seen.add(v)
        return v


def operation_name(path: str) -> str:
    """`gen_ai.operation.name` for an OpenAI route."""
    return _OPERATIONS.get(path, "chat")


def usage_from_tail(tail: bytes) -> tuple[int, int] | None:
    """(prompt_tokens, completion_tokens) of the last `usage` object in `tail`, else None.

    One C-speed regex scan of at most a few kilobytes per request. The last object wins (a
    stream's usage chunk follows its content chunks; `"usage": null` chunks do not match)."""
    last = None
    for m in _USAGE_RE.finditer(tail):
        last = m
    if last is None:
        return None
    inner = last.group(1)
    # top-level fields only: drop nested `{...}` detail objects before matching
    flat = re.sub(rb"\{[^{}]*\}", b"", inner)
    p, c = _PROMPT_RE.search(flat), _COMPLETION_RE.search(flat)
    if p is None or c is None:
        return None
    return int(p.group(1)), int(c.group(1))
