"""Logging and tracing set-up shared by every Fleetgate server.

Logs are one JSON object per line (ts, level, service, logger, msg, then any `extra=` fields) so a
log pipeline can index them without parsing; secrets never reach them: `redact()` masks credential
headers, and the formatter masks credential-looking extras and bearer tokens in messages as a
safety net. Traces use the OpenTelemetry SDK and the W3C TraceContext propagator, so a
`traceparent` entering the global router reaches the model server through the cluster gateway.
"""

from __future__ import annotations

import datetime as _dt
import json as _json
import logging
import os
import re
import sys
import weakref
from collections.abc import Mapping, MutableMapping
from contextlib import AbstractContextManager, nullcontext
from contextvars import Token
from typing import Any

from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.context import Context
from opentelemetry.propagators.textmap import Getter
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import (
    BatchSpanProcessor,
    ConsoleSpanExporter,
    SimpleSpanProcessor,
    SpanExporter,
    SpanProcessor,
)
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

__all__ = [
    "REDACTED",
    "JsonFormatter",
    "client_context",
    "data_path_span",
    "extract_context",
    "in_client_trace",
    "inject_traceparent",
    "memory_exporter",
    "redact",
    "setup_logging",
    "setup_tracing",
    "spans_exported",
]

REDACTED = "[REDACTED]"

# --- redaction -------------------------------------------------------------------------------

_SECRET_NAMES = frozenset({"authorization", "proxy-authorization", "cookie", "set-cookie"})
_SECRET_SUBSTRINGS = (
    "api-key",
    "api_key",
    "apikey",
    "access-key",
    "access_key",
    "private-key",
    "private_key",
)
# Whole name segments (split on - _ .): `x-agent-token` is secret, `x-ratelimit-limit-tokens` is not.
_SECRET_SEGMENTS = frozenset(
    {"token", "secret", "password", "passwd", "credential", "credentials", "auth", "session", "bearer"}
)
_SEGMENT_SPLIT_RE = re.compile(r"[-_.]")
_BEARER_RE = re.compile(r"(?i)\b(bearer|basic)\s+[A-Za-z0-9._~+/=-]+")
_KEY_RE = re.compile(r"\bsk-[A-Za-z0-9_-]{6,}")


def is_secret_name(name: str) -> bool:
    """True for header/field names that carry credentials (authorization, x-api-key, *token*…)."""
    lowered = name.lower()
    if lowered in _SECRET_NAMES or any(part in lowered for part in _SECRET_SUBSTRINGS):
        return True
    return not _SECRET_SEGMENTS.isdisjoint(_SEGMENT_SPLIT_RE.split(lowered))


def scrub(text: str) -> str:
    """Mask bearer/basic credentials and `sk-…` API keys inside free text."""
    if "earer" not in text and "asic" not in text and "sk-" not in text:
        return text
    return _KEY_RE.sub(REDACTED, _BEARER_RE.sub(lambda m: f"{m.group(1)} {REDACTED}", text))


def redact(headers: Mapping[str, str]) -> dict[str, str]:
    """A copy of `headers` safe to log: credential values replaced by `[REDACTED]`."""
    return {k: (REDACTED if is_secret_name(k) else v) for k, v in headers.items()}


def _safe(key: str, value: Any) -> Any:
    if is_secret_name(key):
        return REDACTED
    if isinstance(value, Mapping):
        return {str(k): _safe(str(k), v) for k, v in value.items()}
    if isinstance(value, str):
        return scrub(value)
    return value


# --- logging ---------------------------------------------------------------------------------

# Attributes every LogRecord has; anything else on a record came from `extra=`.
_RECORD_ATTRS = frozenset(logging.LogRecord("", 0, "", 0, "", None, None).__dict__) | {"message", "asctime"}


def _extras(record: logging.LogRecord) -> dict[str, Any]:
    return {
        k: _safe(k, v) for k, v in record.__dict__.items() if k not in _RECORD_ATTRS and not k.startswith("_")
    }


def _trace_ids() -> dict[str, str]:
    ctx = trace.get_current_span().get_span_context()
    if not ctx.is_valid:
        return {}
    return {"trace_id": format(ctx.trace_id, "032x"), "span_id": format(ctx.span_id, "016x")}


class JsonFormatter(logging.Formatter):
    """One JSON object per record: ts, level, service, logger, msg, extras (+ trace ids, exc)."""

    def __init__(self, service: str) -> None:
        super().__init__()
        self.service = service

    def format(self, record: logging.LogRecord) -> str:
        entry: dict[str, Any] = {
            "ts": _dt.datetime.fromtimestamp(record.created, tz=_dt.UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname,
            "service": self.service,
            "logger": record.name,
            "msg": scrub(record.getMessage()),
        }
        entry.update(_trace_ids())
        entry.update(_extras(record))
        if record.exc_info:
            entry["exc"] = scrub(self.formatException(record.exc_info))
        return _json.dumps(entry, default=str, ensure_ascii=False)


class _TextFormatter(logging.Formatter):
    """Human-readable twin of JsonFormatter for terminals; same redaction."""

    def __init__(self, service: str) -> None:
        super().__init__("%(asctime)s %(levelname)s " + service + " %(name)s: %(message)s")

    def format(self, record: logging.LogRecord) -> str:
        line = scrub(super().format(record))
        extras = _extras(record)
        if extras:
            line += " " + " ".join(f"{k}={v}" for k, v in extras.items())
        return line


class _FleetgateHandler(logging.StreamHandler):  # type: ignore[type-arg]
    """Marks the handler setup_logging installed, so calling it again replaces rather than stacks."""


def setup_logging(service: str, level: str = "INFO", json: bool = True) -> None:
    """Route the root logger to stderr as JSON lines (or text) for `service`; idempotent."""
    numeric = logging.getLevelName(level.upper())
    if not isinstance(numeric, int):
        raise ValueError(f"unknown log level {level!r}")
    root = logging.getLogger()
    for handler in list(root.handlers):
        if isinstance(handler, _FleetgateHandler):
            root.removeHandler(handler)
    handler = _FleetgateHandler(sys.stderr)
    handler.setFormatter(JsonFormatter(service) if json else _TextFormatter(service))
    root.addHandler(handler)
    root.setLevel(numeric)
    # Client libraries log full request lines (and would log per-request noise at INFO).
    for noisy in ("httpx", "httpcore", "kubernetes.client.rest"):
        logging.getLogger(noisy).setLevel(max(numeric, logging.WARNING))


# --- tracing ---------------------------------------------------------------------------------

_MEMORY_EXPORTERS: weakref.WeakKeyDictionary[TracerProvider, InMemorySpanExporter] = (
    weakref.WeakKeyDictionary()
)


def _processor(name: str, provider: TracerProvider) -> SpanProcessor | None:
    if name == "none":
        return None
    if name == "memory":
        memory = InMemorySpanExporter()
        _MEMORY_EXPORTERS[provider] = memory
        return SimpleSpanProcessor(memory)  # synchronous, so tests see spans at once
    exporter: SpanExporter
    if name == "console":
        exporter = ConsoleSpanExporter()
    elif name == "otlp":
        try:
            from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import (  # type: ignore[import-not-found]
                OTLPSpanExporter,
            )
        except ImportError:
            raise ValueError(
                "traces exporter `otlp` needs the opentelemetry-exporter-otlp-proto-grpc package"
            ) from None
        exporter = OTLPSpanExporter()
    else:
        raise ValueError(f"unknown traces exporter {name!r} (expected console, memory, otlp or none)")
    return BatchSpanProcessor(exporter)


def setup_tracing(service: str, exporter: str | None = None) -> TracerProvider:
    """A TracerProvider for `service` exporting to `exporter` ("console" | "memory" | "otlp" | None).

    None reads `OTEL_TRACES_EXPORTER` (comma-separated, default none: spans still get real ids,
    so trace context propagates even when nothing is exported). The first provider created in a
    process becomes the global one (OpenTelemetry allows setting it once); later ones are returned
    for explicit use.
    """
    names = exporter if exporter is not None else os.environ.get("OTEL_TRACES_EXPORTER", "none")
    provider = TracerProvider(resource=Resource.create({"service.name": service}))
    for name in (n.strip().lower() for n in names.split(",")):
        if name:
            processor = _processor(name, provider)
            if processor is not None:
                provider.add_span_processor(processor)
    if isinstance(trace.get_tracer_provider(), trace.ProxyTracerProvider):
        trace.set_tracer_provider(provider)
    return provider


def spans_exported() -> bool:
    """True when the global provider has a span processor, i.e. spans would go somewhere.

    The data path skips creating its spans otherwise (two spans cost ~8% of a proxied request's
    CPU); trace context still flows, because the client's `traceparent` is forwarded unchanged.
    """
    active = getattr(trace.get_tracer_provider(), "_active_span_processor", None)
    return bool(getattr(active, "_span_processors", ()))


def data_path_span(tracer: trace.Tracer, name: str) -> AbstractContextManager[trace.Span]:
    """`tracer.start_as_current_span(name)` when spans are exported, else a no-op span (see
    `spans_exported`): attributes set on it cost nothing."""
    if spans_exported():
        return tracer.start_as_current_span(name)
    return nullcontext(trace.INVALID_SPAN)


def memory_exporter(provider: TracerProvider) -> InMemorySpanExporter | None:
    """The in-memory exporter of a provider built with exporter "memory" (for tests and demos)."""
    return _MEMORY_EXPORTERS.get(provider)


# --- W3C trace-context propagation -----------------------------------------------------------

_PROPAGATOR = TraceContextTextMapPropagator()


class _CaseInsensitiveGetter(Getter[Mapping[str, str]]):
    """HTTP header names are case-insensitive; ASGI/httpx/gRPC carriers differ in case."""

    def get(self, carrier: Mapping[str, str], key: str) -> list[str] | None:
        value = carrier.get(key)
        if value is None:
            for k, v in carrier.items():
                if k.lower() == key:
                    value = v
                    break
        return None if value is None else [value]

    def keys(self, carrier: Mapping[str, str]) -> list[str]:
        return [k.lower() for k in carrier]


_GETTER = _CaseInsensitiveGetter()


def inject_traceparent(headers: MutableMapping[str, str], context: Context | None = None) -> None:
    """Add `traceparent` (and `tracestate`) for the current (or given) span context to `headers`."""
    _PROPAGATOR.inject(headers, context=context)


def extract_context(headers: Mapping[str, str]) -> Context:
    """The trace context carried by incoming `traceparent`/`tracestate` headers (empty if none)."""
    return _PROPAGATOR.extract(headers, getter=_GETTER)


def client_context(headers: Mapping[str, str]) -> Context | None:
    """The client's trace context to join, or None when the request carries no `traceparent`
    (`headers` with lower-case names). Without one there is nothing to join, and the propagator's
    pass over the headers and the context swap cost a lone request ~14 µs cold; with one, the
    context is joined even when no span is exported, so log lines still carry the client's trace id."""
    if "traceparent" not in headers:
        return None
    return extract_context(headers)


class in_client_trace:
    """`with in_client_trace(headers):` runs its body in the client's trace context when the request
    carries a `traceparent` (`client_context`), else as is. A slotted class, not a generator-based
    context manager: it sits on every request of both tiers."""

    __slots__ = ("_ctx", "_token")

    def __init__(self, headers: Mapping[str, str]) -> None:
        self._ctx = client_context(headers)
        self._token: Token[Context] | None = None

    def __enter__(self) -> None:
        if self._ctx is not None:
            self._token = otel_context.attach(self._ctx)

    def __exit__(self, *exc: object) -> None:
        if self._token is not None:
            otel_context.detach(self._token)
