"""Filtered scrapes: ask a pod for only the samples routing reads (`GET /metrics?name[]=...`).

vLLM and SGLang serve prometheus_client's exposition, which honours `name[]` query parameters:
it renders only the samples of those exact sample names (a histogram's `_sum`/`_count` without its
`_bucket` lines), so the body shrinks from ~50 KB to ~1-2 KB, and with it the pod's render CPU and
the gateway's read. Engines that ignore the query (TGI's Rust exporter) answer their whole body;
`ignores_filter` tells such a body apart cheaply, and the scraper then reads the latency figures
from that same body instead of asking again (`common.promtext` parses only the wanted lines of
either body, so a full body costs parse time but is read correctly).
"""

from __future__ import annotations

from functools import lru_cache
from urllib.parse import urlencode

__all__ = ["ignores_filter", "metrics_path"]

PLAIN_PATH = "/metrics"


@lru_cache(maxsize=64)
def metrics_path(names: frozenset[str] | None) -> str:
    """`/metrics` with one `name[]` parameter per sample name (sorted: a stable URL); None: unfiltered."""
    if not names:
        return PLAIN_PATH
    return PLAIN_PATH + "?" + urlencode([("name[]", n) for n in sorted(names)])


def sample_lines(body: bytes) -> int:
    """Lines that are neither comments nor empty, counted with C-speed `bytes.count` only."""
    if not body:
        return 0
    lines = body.count(b"\n") + (not body.endswith(b"\n"))
    comments = body.count(b"\n#") + body.startswith(b"#")
    empty = body.count(b"\n\n") + body.startswith(b"\n")
    return lines - comments - empty


def ignores_filter(body: bytes, asked: int) -> bool:
    """Whether a pod answered a filtered request with (much) more than it was asked for.

    `asked`: the number of sample names requested. No name is asked for its `_bucket` lines, so a
    bucket line proves an unfiltered body; otherwise more than 8 label sets per asked name (a
    filtered body has one per model/rank/finish reason) does."""
    return b"_bucket{" in body or sample_lines(body) > 8 * max(1, asked)
