"""Filtered scrapes: ask a pod for only the samples routing reads (`GET /metrics?name[]=...`).

vLLM and SGLang serve prometheus_client's exposition, which honours `name[]` query parameters:
it renders only the samples of those exact sample names (a histogram's `_sum`/`_count` without its
`_bucket` lines), so the body shrinks from ~50 KB to ~1-2 KB, and with it the pod's render CPU and
the gateway's read. Engines that ignore the query (TGI's Rust exporter) answer their whole body;
`ignores_filter` tells such a body apart cheaply, and the scraper then reads the latency figures
from that same body instead of asking again (`common.promtext` parses only the wanted lines of
either body, so a full body costs parse time but is read correctly).

vLLM's own `/metrics` ignores the filter: its API server registers prometheus-fastapi-instrumentator's
`expose()` route at `/metrics` (a FastAPI handler that renders the whole registry, in a thread)
*before* it appends the prometheus_client ASGI app as `Mount("/metrics")` with the path regex
`^/metrics(?P<path>.*)$`, so the exact path `/metrics` never reaches the app that honours `name[]`
(`vllm/entrypoints/serve/instrumentator/metrics.py`; the whole 45 KB body costs the API server
~5 ms of CPU per scrape). `/metrics/` does not match the FastAPI route and reaches the Mount: every
vLLM version since the Mount was added answers it filtered. So filtered vLLM scrapes ask for
`/metrics/?name[]=...` (`FILTERED_BASE`), and a pod that refuses that path (404, a redirect) is
asked at `/metrics` from then on (the scraper remembers it per pod).
"""

from __future__ import annotations

from functools import lru_cache
from urllib.parse import urlencode

__all__ = ["FILTERED_BASE", "PLAIN_PATH", "REFUSED_STATUSES", "SLASH_PATH", "ignores_filter", "metrics_path"]

PLAIN_PATH = "/metrics"
SLASH_PATH = "/metrics/"  # vLLM: the prometheus_client Mount, past the route that ignores name[]
FILTERED_BASE: dict[str, str] = {"vllm": SLASH_PATH}  # engine → the path its filtered scrapes use
REFUSED_STATUSES = frozenset({301, 302, 307, 308, 404, 405})  # the base path is not served there


@lru_cache(maxsize=64)
def metrics_path(names: frozenset[str] | None, base: str = PLAIN_PATH) -> str:
    """`base` with one `name[]` parameter per sample name (sorted: a stable URL); None: unfiltered."""
    if not names:
        return PLAIN_PATH
    return base + "?" + urlencode([("name[]", n) for n in sorted(names)])


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
