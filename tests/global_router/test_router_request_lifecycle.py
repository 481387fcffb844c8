"""Per-request lifecycle at the router: slots freed on disconnect, shedding, trace spans."""

from __future__ import annotations

import asyncio
import io
import json
import logging

from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from common.telemetry import JsonFormatter
from global_router.tenants import hash_key
from tests.global_router.fleet_fixtures import MODEL
from tests.global_router.router_harness import BATCH_KEY, harness, router_config

CHAT = {"model": MODEL, "messages": [{"role": "user", "content": "hello"}], "max_tokens": 5}


async def test_client_disconnect_mid_stream_frees_its_concurrency_slot() -> None:
    cfg = router_config(
        tenants=[{"name": "one-at-a-time", "apiKeySha256": [hash_key("sk-one")], "maxConcurrency": 1}]
    )
    async with harness(["a"], cfg) as h:
        await h.publish("a")
        h.gateways["a"].chunks = 300  # a long stream (~3 s)
        hd = h.headers("sk-one")
        async with h.client.stream(
            "POST", "/v1/chat/completions", json={**CHAT, "stream": True}, headers=hd
        ) as r:
            assert r.status_code == 200
            async for _ in r.aiter_raw():
                break  # the client leaves after the first bytes
            busy = await h.client.post("/v1/chat/completions", json=CHAT, headers=hd)
            assert busy.status_code == 429 and "concurrent" in busy.json()["error"]["message"]
        for _ in range(40):
            if h.router.tracker.inflight("a") == 0:
                break
            await asyncio.sleep(0.05)
        assert h.router.tracker.inflight("a") == 0
        r2 = await h.client.post("/v1/chat/completions", json=CHAT, headers=hd)
        assert r2.status_code == 200


async def test_sheddable_tenant_refused_first_when_fleet_is_full() -> None:
    async with harness(["a"]) as h:
        await h.publish("a", headroom=0, queued=12)
        shed = await h.client.post("/v1/chat/completions", json=CHAT, headers=h.headers(BATCH_KEY))
        assert shed.status_code == 429 and shed.json()["error"]["code"] == "fleet_saturated"
        assert shed.headers["retry-after"] == "1"
        ok = await h.client.post("/v1/chat/completions", json=CHAT, headers=h.headers())
        assert ok.status_code == 200


async def test_router_spans_continue_the_clients_trace() -> None:
    provider = trace.get_tracer_provider()
    if not isinstance(provider, TracerProvider):
        from common.telemetry import setup_tracing

        setup_tracing("fleetgate-tests")
        provider = trace.get_tracer_provider()
    assert isinstance(provider, TracerProvider)
    exporter = InMemorySpanExporter()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    trace_id = "4bf92f3577b34da6a3ce929d0e0e4736"
    try:
        async with harness(["a"]) as h:
            await h.publish("a")
            hd = h.headers(traceparent=f"00-{trace_id}-00f067aa0ba902b7-01")
            r = await h.client.post("/v1/chat/completions", json=CHAT, headers=hd)
            assert r.status_code == 200
            spans = {s.name: s for s in exporter.get_finished_spans()}
            assert {"router.select", "router.forward"} <= set(spans)
            fwd = spans["router.forward"]
            assert format(fwd.context.trace_id, "032x") == trace_id
            assert fwd.attributes is not None and fwd.attributes["fleetgate.cluster"] == "a"
            sent = h.gateways["a"].requests[-1]["traceparent"].split("-")
            assert sent[1] == trace_id and sent[2] == format(fwd.context.span_id, "016x")
    finally:
        exporter.shutdown()


async def test_router_log_lines_carry_the_clients_trace_id_without_an_exporter() -> None:
    """The router joins the client's trace whenever a traceparent comes (not only when spans are
    exported), so the lines it logs while serving the request can be found by the client's trace id."""
    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    handler.setFormatter(JsonFormatter("router"))
    logger = logging.getLogger("fleetgate.router.forward")
    logger.addHandler(handler)
    level, logger.level = logger.level, logging.INFO
    trace_id = "5bf92f3577b34da6a3ce929d0e0e4737"
    try:
        async with harness(["a", "b"]) as h:
            for cid in ("a", "b"):
                await h.publish(cid)
                h.gateways[cid].mode = "error500"  # each attempt fails before the first byte: logged
            hd = h.headers(traceparent=f"00-{trace_id}-00f067aa0ba902b7-01")
            r = await h.client.post("/v1/chat/completions", json=CHAT, headers=hd)
            assert r.status_code == 500 and r.json()["error"]
            sent = h.gateways["a"].requests[-1]["traceparent"].split("-")
            assert sent[1] == trace_id
    finally:
        logger.removeHandler(handler)
        logger.setLevel(level)
    lines = [json.loads(line) for line in stream.getvalue().splitlines()]
    failed = [e for e in lines if "failed before the first byte" in e["msg"]]
    assert failed, lines
    assert {e.get("trace_id") for e in failed} == {trace_id}
