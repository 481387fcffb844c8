"""Request ids and the per-request access log line, the same in both tiers.

Every request gets an id: the client's `x-request-id` when it is a sane token (so a client, or a
load balancer in front, can correlate), otherwise a fresh one. It comes back on every response
and error, travels router → gateway → model server in the same header, and is in the request's
access-log line in each tier, so one grep follows a request through the whole path.

The access log is one JSON line per request at INFO on logger `fleetgate.access` (switch:
`accessLog: false` in either tier's config). A record is filled in as the request goes and written
once, whatever way the request ends.
"""

from __future__ import annotations

import logging
import os
import re
import time
from collections.abc import Awaitable, Callable, MutableMapping
from dataclasses import dataclass, field
from typing import Any

Send = Callable[[MutableMapping[str, Any]], Awaitable[None]]

REQUEST_ID_HEADER = "x-request-id"
_RID = REQUEST_ID_HEADER.encode()
_VALID = re.compile(r"[A-Za-z0-9._:@/+=-]{1,128}")

access_log = logging.getLogger("fleetgate.access")


def request_id(client_value: str | None) -> str:
    """The client's id if it is a plain token of at most 128 characters, else a new random one."""
    if client_value and _VALID.fullmatch(client_value):
        return client_value
    return os.urandom(12).hex()


def with_request_id(send: Send, rid: str) -> Send:
    """An ASGI `send` that stamps `x-request-id: rid` on the response start (replacing any
    upstream's own, e.g. a pod's)."""
    value = rid.encode("latin-1")

    async def stamped(msg: MutableMapping[str, Any]) -> None:
        if msg["type"] == "http.response.start":
            hdrs = [h for h in msg.get("headers", ()) if h[0] != _RID]
            hdrs.append((_RID, value))
            msg["headers"] = hdrs
        await send(msg)

    return stamped


@dataclass(slots=True)
class RequestRecord:
    """What one access-log line says; fields left at their defaults are omitted."""

    request_id: str
    path: str
    started: float = field(default_factory=time.monotonic)
    model: str = "-"
    status: int = 0
    outcome: str = "-"
    attempts: int = 0
    target: str = "-"  # the pod (gateway) or cluster (router) that answered
    profile: str = "-"
    tenant: str = "-"
    traffic_class: str = "-"
    stream: bool = False
    ttft_s: float | None = None
    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    written: bool = False

    def first_token(self) -> None:
        if self.ttft_s is None:
            self.ttft_s = time.monotonic() - self.started

    def write(self, enabled: bool = True) -> None:
        """Log the line once (later calls do nothing)."""
        if self.written:
            return
        self.written = True
        if not enabled or not access_log.isEnabledFor(logging.INFO):
            return
        extra: dict[str, Any] = {
            "request_id": self.request_id,
            "path": self.path,
            "model": self.model,
            "status": self.status,
            "outcome": self.outcome,
            "attempts": self.attempts,
            "target": self.target,
            "stream": self.stream,
            "duration_ms": round((time.monotonic() - self.started) * 1000.0, 2),
        }
        for name in ("profile", "tenant", "traffic_class"):
            value = getattr(self, name)
            if value != "-":
                extra[name] = value
        if self.ttft_s is not None:
            extra["ttft_ms"] = round(self.ttft_s * 1000.0, 2)
        if self.prompt_tokens is not None:
            extra["prompt_tokens"] = self.prompt_tokens
        if self.completion_tokens is not None:
            extra["completion_tokens"] = self.completion_tokens
        access_log.info("request", extra=extra)
