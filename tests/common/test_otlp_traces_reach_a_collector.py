"""`OTEL_TRACES_EXPORTER=otlp` (the `otlp` extra, installed with the dev extras) sends spans over
OTLP/gRPC to the collector named by OpenTelemetry's standard variables: here a real gRPC server on
127.0.0.1 implementing the collector's TraceService."""

from __future__ import annotations

import threading
from concurrent import futures
from typing import Any

import grpc
import pytest

try:  # a third-party extra: absent, or broken by an install-order file clash (below), it skips
    import opentelemetry.exporter.otlp.proto.grpc.trace_exporter as otlp  # noqa: F401
except ImportError as exc:
    # opentelemetry-exporter-otlp-proto-grpc 1.45 pulls opentelemetry-exporter-otlp-common, which
    # ships its own copy of opentelemetry/proto/common/v1/common_pb2.py; installed after
    # opentelemetry-proto, it leaves a copy without InstrumentationScope and the exporter cannot import
    pytest.skip(
        f"the OTLP exporter does not import here ({exc}); pip install -e '.[otlp]'", allow_module_level=True
    )
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2, trace_service_pb2_grpc

from common.telemetry import setup_tracing


class _Collector(trace_service_pb2_grpc.TraceServiceServicer):
    def __init__(self) -> None:
        self.spans: list[tuple[str, str]] = []  # (service.name, span name)
        self.got = threading.Event()

    def Export(self, request: Any, context: Any) -> Any:
        for rs in request.resource_spans:
            service = next(a.value.string_value for a in rs.resource.attributes if a.key == "service.name")
            self.spans += [(service, s.name) for ss in rs.scope_spans for s in ss.spans]
        self.got.set()
        return trace_service_pb2.ExportTraceServiceResponse()


def test_spans_reach_the_otlp_endpoint_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    setup_tracing("tests", exporter="none")  # whichever comes first is global: keep that one silent
    collector = _Collector()
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=2))
    trace_service_pb2_grpc.add_TraceServiceServicer_to_server(collector, server)
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    try:
        monkeypatch.setenv("OTEL_TRACES_EXPORTER", "otlp")
        monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", f"http://127.0.0.1:{port}")
        monkeypatch.setenv("OTEL_EXPORTER_OTLP_INSECURE", "true")
        provider = setup_tracing("otlp-test-service")
        with provider.get_tracer("test").start_as_current_span("router.forward"):
            pass
        assert provider.force_flush(timeout_millis=30_000)
        assert collector.got.wait(30)
        assert ("otlp-test-service", "router.forward") in collector.spans
        provider.shutdown()
    finally:
        server.stop(grace=None)
