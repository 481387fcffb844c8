"""Connection hygiene of a tier's HTTP server (the same block in the gateway spec and router config)."""

from __future__ import annotations

from typing import Annotated

from msgspec import Meta, Struct


class HttpServer(Struct, rename="camel", forbid_unknown_fields=True, kw_only=True, omit_defaults=True):
    """Limits per client connection (see `common/http_server.py`): a connection that has not sent
    a request's whole headers within `headerTimeoutS` is closed (slowloris), an idle keep-alive
    connection after `keepAliveTimeoutS` (longer than the usual 60 s of load balancers in front, so
    they close first), and connections beyond `maxConnections` get 503 JSON and are closed.

    On SIGTERM (docs/drain.md) the server first leaves rotation while still serving — `/ready`
    answers 503 and a gateway reports itself draining to the global router — for `drainNoticeS` (and,
    for a gateway with a router, until the router acknowledged that report), then stops accepting
    and gives requests in flight up to `drainTimeoutS` to finish before cancelling them. Keep the two
    under the pod's `terminationGracePeriodSeconds` (30 s in the charts)."""

    header_timeout_s: Annotated[float, Meta(gt=0, le=600)] = 10.0
    keep_alive_timeout_s: Annotated[int, Meta(ge=1, le=3600)] = 75
    max_connections: Annotated[int, Meta(ge=1)] = 10_000
    drain_notice_s: Annotated[float, Meta(ge=0, le=600)] = 2.0
    drain_timeout_s: Annotated[int, Meta(ge=1, le=3600)] = 25
