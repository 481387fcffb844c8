"""traceparent survives inject → extract; logs are JSON lines without secrets."""

from __future__ import annotations

import io
import json
import logging
from collections.abc import Iterator

import pytest
from opentelemetry import context as otel_context
from opentelemetry import trace

from common.telemetry import (
    REDACTED,
    JsonFormatter,
    client_context,
    extract_context,
    in_client_trace,
    inject_traceparent,
    memory_exporter,
    redact,
    setup_logging,
    setup_tracing,
)


def test_traceparent_survives_inject_then_extract_and_child_spans_keep_the_trace_id() -> None:
    provider = setup_tracing("test-caller", exporter="memory")
    tracer = provider.get_tracer("caller")
    headers: dict[str, str] = {}
    with tracer.start_as_current_span("client-call") as caller:
        inject_traceparent(headers)
    caller_ctx = caller.get_span_context()
    version, trace_id, span_id, flags = headers["traceparent"].split("-")
    assert version == "00" and int(flags, 16) & 1  # sampled
    assert int(trace_id, 16) == caller_ctx.trace_id and int(span_id, 16) == caller_ctx.span_id

    # The next hop receives the headers with arbitrary case, as HTTP allows.
    incoming = {"TraceParent": headers["traceparent"], "content-type": "application/json"}
    server = setup_tracing("test-callee", exporter="memory").get_tracer("callee")
    with server.start_as_current_span("handle", context=extract_context(incoming)) as span:
        downstream: dict[str, str] = {}
        inject_traceparent(downstream)
    assert span.get_span_context().trace_id == caller_ctx.trace_id
    parent = getattr(span, "parent", None)  # an SDK span
    assert parent is not None and parent.span_id == caller_ctx.span_id
    assert downstream["traceparent"].split("-")[1] == trace_id  # and it travels on

    exported = memory_exporter(provider)
    assert exported is not None
    assert [s.name for s in exported.get_finished_spans()] == ["client-call"]


def test_extract_from_headers_without_traceparent_gives_an_empty_context() -> None:
    ctx = extract_context({"authorization": "Bearer x"})
    assert not trace.get_current_span(ctx).get_span_context().is_valid
    token = otel_context.attach(ctx)
    try:
        headers: dict[str, str] = {}
        inject_traceparent(headers)
        assert "traceparent" not in headers
    finally:
        otel_context.detach(token)


def test_a_malformed_traceparent_is_ignored() -> None:
    ctx = extract_context({"traceparent": "00-zz-not-valid"})
    assert not trace.get_current_span(ctx).get_span_context().is_valid


def test_exporter_comes_from_the_environment_and_unknown_names_are_rejected(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("OTEL_TRACES_EXPORTER", "memory")
    assert memory_exporter(setup_tracing("env-service")) is not None
    monkeypatch.setenv("OTEL_TRACES_EXPORTER", "none")
    assert memory_exporter(setup_tracing("env-service")) is None
    with pytest.raises(ValueError, match="zipkin-ish"):
        setup_tracing("x", exporter="zipkin-ish")


def test_redact_masks_credential_headers_only() -> None:
    headers = {
        "Authorization": "Bearer sk-live-123456789",
        "x-api-key": "abc",
        "api-key": "abc",
        "X-Fleetgate-Agent-Token": "t",
        "cookie": "session=1",
        "content-type": "application/json",
        "x-ratelimit-remaining-tokens": "9000",
        "x-goog-api-key": "g",
        "x-session-id": "s",
        "traceparent": "00-" + "1" * 32 + "-" + "2" * 16 + "-01",
    }
    safe = redact(headers)
    assert {k for k, v in safe.items() if v == REDACTED} == {
        "Authorization",
        "x-api-key",
        "api-key",
        "X-Fleetgate-Agent-Token",
        "cookie",
        "x-goog-api-key",
        "x-session-id",
    }
    assert safe["content-type"] == "application/json" and safe["traceparent"] == headers["traceparent"]


@pytest.fixture
def json_log() -> Iterator[tuple[logging.Logger, io.StringIO]]:
    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    handler.setFormatter(JsonFormatter("svc"))
    logger = logging.getLogger("fleetgate.test.telemetry")
    logger.addHandler(handler)
    logger.setLevel(logging.INFO)
    logger.propagate = False
    yield logger, stream
    logger.removeHandler(handler)


def test_log_lines_are_json_with_extras_and_no_secrets(json_log: tuple[logging.Logger, io.StringIO]) -> None:
    logger, stream = json_log
    logger.info(
        "forwarding with Authorization: Bearer sk-abcdef123456",
        extra={
            "pod": "pod-1",
            "api_key": "sk-zzzzzzzzzzzz",
            "headers": {"authorization": "Bearer q", "a": "b"},
        },
    )
    try:
        raise RuntimeError("boom")
    except RuntimeError:
        logger.exception("failed")
    first, second = (json.loads(line) for line in stream.getvalue().splitlines())
    assert (
        first["service"] == "svc"
        and first["level"] == "INFO"
        and first["logger"] == "fleetgate.test.telemetry"
    )
    assert first["ts"].endswith("+00:00") and first["pod"] == "pod-1"
    assert first["api_key"] == REDACTED and first["headers"] == {"authorization": REDACTED, "a": "b"}
    assert "sk-abcdef" not in first["msg"] and REDACTED in first["msg"]
    assert second["level"] == "ERROR" and "RuntimeError: boom" in second["exc"]


def test_log_lines_carry_the_current_trace_id(json_log: tuple[logging.Logger, io.StringIO]) -> None:
    logger, stream = json_log
    tracer = setup_tracing("log-trace", exporter="none").get_tracer("t")
    with tracer.start_as_current_span("s") as span:
        logger.info("inside")
    entry = json.loads(stream.getvalue())
    assert entry["trace_id"] == format(span.get_span_context().trace_id, "032x")


def test_client_context_joins_a_traceparent_only(json_log: tuple[logging.Logger, io.StringIO]) -> None:
    """No `traceparent`: nothing to join (None, no propagator pass). With one, the client's trace is
    joined with no span exported, so a log line written in the request carries its trace id."""
    assert client_context({"authorization": "Bearer x", "content-type": "application/json"}) is None
    trace_id = "4bf92f3577b34da6a3ce929d0e0e4736"
    ctx = client_context({"traceparent": f"00-{trace_id}-00f067aa0ba902b7-01"})
    assert ctx is not None
    logger, stream = json_log
    token = otel_context.attach(ctx)
    try:
        logger.info("inside the client's trace")
    finally:
        otel_context.detach(token)
    assert json.loads(stream.getvalue())["trace_id"] == trace_id


def test_in_client_trace_joins_for_its_body_only(json_log: tuple[logging.Logger, io.StringIO]) -> None:
    """The `with` form both tiers use: inside, the client's trace; after, the context as before;
    without a `traceparent`, the context is left as it was."""
    logger, stream = json_log
    trace_id = "5bf92f3577b34da6a3ce929d0e0e4738"
    before = otel_context.get_current()
    with in_client_trace({"traceparent": f"00-{trace_id}-00f067aa0ba902b7-01"}):
        logger.info("inside")
    assert otel_context.get_current() == before
    with in_client_trace({"content-type": "application/json"}):
        assert otel_context.get_current() == before
        logger.info("no trace")
    inside, plain = (json.loads(line) for line in stream.getvalue().splitlines())
    assert inside["trace_id"] == trace_id and "trace_id" not in plain


def test_setup_logging_installs_one_handler_and_rejects_bad_levels(
    capsys: pytest.CaptureFixture[str],
) -> None:
    root = logging.getLogger()
    before_handlers, before_level = list(root.handlers), root.level
    try:
        setup_logging("svc-a", level="debug")
        setup_logging("svc-b", level="INFO")
        added = [h for h in root.handlers if h not in before_handlers]
        assert len(added) == 1 and isinstance(added[0].formatter, JsonFormatter)
        assert added[0].formatter.service == "svc-b" and root.level == logging.INFO
        with pytest.raises(ValueError, match="log level"):
            setup_logging("svc", level="LOUD")
    finally:
        for h in list(root.handlers):
            if h not in before_handlers:
                root.removeHandler(h)
        root.setLevel(before_level)
