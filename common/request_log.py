"""Request ids and the per-request access log line, the same in both tiers.

Every request gets an id: the client's `x-request-id` when it is a sane token (so a client, or a
load balancer in front, can correlate), otherwise a fresh one. It comes back on every response
and error, travels router → gateway → model server in the same header, and is in the request's
access-log line in each tier, so one grep follows a request through the whole path.

The access log is one JSON line per request at INFO on logger `fleetgate.access` (switch:
`accessLog: false` in either tier's config). A record is filled in as the request goes and written
once, whatever way the request ends.

Cost: through `logging` (record, JSON formatter with redaction, a locked write and flush per line)
a line cost ~15% of a proxied request's CPU. When the process logs JSON through
`common.telemetry.setup_logging` alone (every Fleetgate server), lines of the same shape are
encoded with msgspec and written in batches every 50 ms instead (`_FastSink`); any other logging
set-up (tests' caplog, a library user's handlers) gets ordinary log records.
"""

from __future__ import annotations

import asyncio
import datetime as _dt
import logging
import re
import sys
import time
from dataclasses import dataclass, field
from typing import Any

import msgspec

from common.http import Message, Send
from common.nonces import Nonces

REQUEST_ID_HEADER = "x-request-id"
_RID = REQUEST_ID_HEADER.encode()
_VALID = re.compile(r"[A-Za-z0-9._:@/+=-]{1,128}")

access_log = logging.getLogger("fleetgate.access")

_FLUSH_S = 0.05
_FLUSH_BYTES = 64 * 1024


class _FastSink:
    """Batched JSON lines on stderr, the shape `common.telemetry.JsonFormatter` writes."""

    def __init__(self) -> None:
        self._lines: list[bytes] = []
        self._size = 0
        self._scheduled = False
        self._encode = msgspec.json.Encoder().encode
        self._second = -1
        self._prefix = ""

    def _timestamp(self, now: float) -> str:
        """`datetime.now(UTC).isoformat(timespec="milliseconds")`, formatting the date once a second
        (the datetime path was ~2% of a proxied request's CPU)."""
        second = int(now)
        if second != self._second:
            self._second = second
            self._prefix = _dt.datetime.fromtimestamp(second, tz=_dt.UTC).strftime("%Y-%m-%dT%H:%M:%S")
        return f"{self._prefix}.{int((now - second) * 1000):03d}+00:00"

    def emit(self, service: str, extra: dict[str, Any]) -> None:
        entry = {
            "ts": self._timestamp(time.time()),
            "level": "INFO",
            "service": service,
            "logger": access_log.name,
            "msg": "request",
            **extra,
        }
        line = self._encode(entry) + b"\n"
        self._lines.append(line)
        self._size += len(line)
        if self._size >= _FLUSH_BYTES:
            self.flush()
        elif not self._scheduled:
            try:
                asyncio.get_running_loop().call_later(_FLUSH_S, self.flush)
                self._scheduled = True
            except RuntimeError:  # no loop (a sync caller): write at once
                self.flush()

    def flush(self) -> None:
        self._scheduled = False
        if not self._lines:
            return
        data, self._lines, self._size = b"".join(self._lines), [], 0
        try:
            sys.stderr.flush()
            out = getattr(sys.stderr, "buffer", None)
            if out is not None:
                out.write(data)
                out.flush()
            else:
                sys.stderr.write(data.decode())
        except (OSError, ValueError):  # stderr closed at shutdown
            pass


_sink = _FastSink()


def _fast_service() -> str | None:
    """The service name when Fleetgate's JSON logging is the only handler, else None."""
    if access_log.handlers or not access_log.propagate:
        return None
    handlers = logging.getLogger().handlers
    if len(handlers) != 1:
        return None
    fmt = handlers[0].formatter
    service = getattr(fmt, "service", None)
    if type(handlers[0]).__name__ != "_FleetgateHandler" or type(fmt).__name__ != "JsonFormatter":
        return None
    return service if isinstance(service, str) else None


def flush_access_log() -> None:
    _sink.flush()


_new_id = Nonces(12)  # 24 hex characters, as `os.urandom(12).hex()` gave, without a system call each


def request_id(client_value: str | None) -> str:
    """The client's id if it is a plain token of at most 128 characters, else a new random one."""
    if client_value and _VALID.fullmatch(client_value):
        return client_value
    return _new_id()


def with_request_id(send: Send, rid: str) -> Send:
    """An ASGI `send` that stamps `x-request-id: rid` on the response start (replacing any
    upstream's own, e.g. a pod's)."""
    value = rid.encode("latin-1")

    async def stamped(msg: Message) -> None:
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
        service = _fast_service()
        if service is not None:
            _sink.emit(service, extra)
        else:
            access_log.info("request", extra=extra)
