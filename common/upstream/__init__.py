"""A lean HTTP/1.1 client for the data path: keep-alive pools per upstream, httptools parsing.

Both tiers forward through it (Tier 2 → gateways, Tier 1 → pods); see `pool.py` for why.
"""

from common.upstream.connection import BodySink, Response, write_to
from common.upstream.errors import (
    ConnectFailed,
    PoolTimeout,
    UpstreamClosed,
    UpstreamError,
    UpstreamProtocolError,
    UpstreamTimeout,
)
from common.upstream.pool import HostPool, UpstreamPools

__all__ = [
    "BodySink",
    "ConnectFailed",
    "HostPool",
    "PoolTimeout",
    "Response",
    "UpstreamClosed",
    "UpstreamError",
    "UpstreamPools",
    "UpstreamProtocolError",
    "UpstreamTimeout",
    "write_to",
]
