"""Streaming passes through chunk by chunk; the official OpenAI client works through the gateway."""

from __future__ import annotations

import asyncio
import json
import time

import openai

from .conftest import MODEL, chat, running, tiny


async def test_sse_chunks_arrive_over_time_not_all_at_the_end() -> None:
    async with running([tiny(time_scale=4.0)]) as (_fleet, _gw, c):
        arrivals: list[float] = []
        events: list[str] = []
        t0 = time.monotonic()
        body = chat("tell me a story", max_tokens=24, stream=True)
        async with c.stream("POST", "/v1/chat/completions", json=body) as r:
            assert r.status_code == 200
            assert r.headers["content-type"].startswith("text/event-stream")
            async for line in r.aiter_lines():
                if line.startswith("data: "):
                    arrivals.append(time.monotonic() - t0)
                    events.append(line[6:])
        assert events[-1] == "[DONE]"
        tokens = [json.loads(e) for e in events[:-1]]
        assert len(tokens) >= 20
        spread = arrivals[-1] - arrivals[0]
        assert spread > 0.1, arrivals  # ~24 decode steps of ~20 ms each
        # The first token reached the client long before the stream ended.
        assert arrivals[0] < arrivals[-1] / 2, arrivals


async def test_client_disconnect_mid_stream_releases_the_pod() -> None:
    async with running([tiny(time_scale=8.0)]) as (fleet, gw, c):
        body = chat("long answer please", max_tokens=64, stream=True)
        async with c.stream("POST", "/v1/chat/completions", json=body) as r:
            async for _line in r.aiter_lines():
                break  # first chunk, then hang up
        pod = gw.pool.get(fleet.urls[0])
        assert pod is not None
        for _ in range(100):
            if pod.inflight == 0 and fleet.state(0)["num_requests_running"] == 0:
                break
            await asyncio.sleep(0.02)
        assert pod.inflight == 0
        assert fleet.state(0)["num_requests_running"] == 0  # the pod cancelled the abandoned request


async def test_official_openai_client_chat_completion_and_streaming() -> None:
    async with running([tiny(), tiny()]) as (_fleet, gw, _c):
        client = openai.AsyncOpenAI(base_url=f"{gw.url}/v1", api_key="unused", max_retries=0)
        try:
            chat_resp = await client.chat.completions.create(
                model=MODEL, messages=[{"role": "user", "content": "hi"}], max_tokens=5
            )
            assert chat_resp.choices[0].message.content
            assert chat_resp.usage is not None and chat_resp.usage.completion_tokens == 5

            comp = await client.completions.create(model=MODEL, prompt="Once upon", max_tokens=4)
            assert comp.choices[0].text
            assert comp.usage is not None and comp.usage.completion_tokens == 4

            stream = await client.chat.completions.create(
                model=MODEL,
                messages=[{"role": "user", "content": "stream"}],
                max_tokens=6,
                stream=True,
                stream_options={"include_usage": True},
            )
            pieces, usage = [], None
            async for chunk in stream:
                if chunk.choices and chunk.choices[0].delta.content:
                    pieces.append(chunk.choices[0].delta.content)
                if chunk.usage is not None:
                    usage = chunk.usage
            assert pieces and usage is not None and usage.completion_tokens == 6

            models = await client.models.list()
            assert [m.id for m in models.data] == [MODEL]

            try:
                await client.chat.completions.create(
                    model="nope", messages=[{"role": "user", "content": "x"}]
                )
            except openai.NotFoundError as exc:
                assert exc.status_code == 404
            else:
                raise AssertionError("unknown model accepted")
        finally:
            await client.close()


async def test_client_trace_context_continues_through_pick_and_forward_spans() -> None:
    from opentelemetry import trace
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    from common.telemetry import setup_tracing

    setup_tracing("gateway-test", exporter="none")  # becomes the global provider unless one exists
    provider = trace.get_tracer_provider()
    assert isinstance(provider, TracerProvider)
    exporter = InMemorySpanExporter()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    async with running([tiny()]) as (_fleet, _gw, c):
        trace_id = "4bf92f3577b34da6a3ce929d0e0e4736"
        r = await c.post(
            "/v1/chat/completions",
            json=chat("traced"),
            headers={"traceparent": f"00-{trace_id}-00f067aa0ba902b7-01"},
        )
        assert r.status_code == 200
    spans = {s.name: s for s in exporter.get_finished_spans()}
    assert {"gateway.pick", "gateway.forward"} <= set(spans)
    for name in ("gateway.pick", "gateway.forward"):
        ctx = spans[name].context
        assert ctx is not None and trace.format_trace_id(ctx.trace_id) == trace_id
