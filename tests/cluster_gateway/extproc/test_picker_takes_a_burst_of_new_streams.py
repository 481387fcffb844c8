"""A burst of new ext_proc streams (one per HTTP request) is queued, never refused by gRPC core.

gRPC core holds new RPCs until the Python server asks for them; with its defaults it starts
refusing them at random past 1,000 waiting (Envoy: `ext_proc_error_gRPC_error_1{CANCELLED}`, a 503
to the client). Here 1,500 streams open while the picker's loop is held busy, so all of them wait
in that queue at once; every one must get its answer.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections import Counter

import grpc
from envoy.service.ext_proc.v3 import external_processor_pb2 as pb
from envoy.service.ext_proc.v3 import external_processor_pb2_grpc as pb_grpc

from cluster_gateway.pool import EndpointPool
from common.control_thread import ControlThread

from .conftest import add_pod, start_picker
from .test_picker_protocol import headers_msg

STREAMS = 1500


async def _burst(target: str, opened: threading.Event) -> Counter[str]:
    """On its own loop, like Envoy: open every stream at once and read each one's answer."""
    outcomes: Counter[str] = Counter()
    async with grpc.aio.insecure_channel(target) as ch:
        stub = pb_grpc.ExternalProcessorStub(ch)

        async def one() -> None:
            call = stub.Process(timeout=120)
            try:
                await call.write(headers_msg("/v1/models", method="GET", eos=True))
                resp = await call.read()
                ok = resp is not grpc.aio.EOF and isinstance(resp, pb.ProcessingResponse)
                outcomes["answered" if ok and resp.HasField("immediate_response") else "no answer"] += 1
                await call.done_writing()
            except grpc.aio.AioRpcError as exc:
                outcomes[exc.code().name] += 1

        tasks = [asyncio.create_task(one()) for _ in range(STREAMS)]
        await asyncio.sleep(0.5)  # every stream is on the wire by now, waiting for the picker
        opened.set()
        await asyncio.gather(*tasks)
    return outcomes


async def test_fifteen_hundred_streams_opened_at_once_are_all_answered() -> None:
    pool = EndpointPool()
    add_pod(pool, "a", 1)
    picker, server = await start_picker(pool)
    client = ControlThread("envoy-like-client")
    client.start()
    try:
        opened = threading.Event()
        done = client.submit(_burst(picker.target, opened))
        deadline = time.monotonic() + 30
        while not opened.is_set() and time.monotonic() < deadline:  # the picker's loop never yields
            sum(range(1000))
        outcomes = await asyncio.wrap_future(done)
        assert outcomes == Counter({"answered": STREAMS}), outcomes
    finally:
        await server.stop(0.5)
        client.stop()
