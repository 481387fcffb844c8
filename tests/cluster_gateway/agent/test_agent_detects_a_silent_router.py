"""A router that accepts the stream but never answers (half-open, wedged) is treated as lost."""

from __future__ import annotations

from collections.abc import AsyncIterator

import grpc

from common.proto.fleetgate.v1 import capacity_pb2, capacity_pb2_grpc
from tests.eventually import eventually
from tests.global_router.capacity.helpers import running_agent, sample_pool


class _MuteRouter(capacity_pb2_grpc.CapacityServiceServicer):
    """Reads reports and never replies."""

    def __init__(self) -> None:
        self.streams = 0

    async def Report(  # type: ignore[override]
        self, request_iterator: AsyncIterator[capacity_pb2.CapacityReport], context: grpc.aio.ServicerContext
    ) -> AsyncIterator[capacity_pb2.Directive]:
        self.streams += 1
        async for _ in request_iterator:
            pass
        if False:  # an async generator that yields nothing
            yield capacity_pb2.Directive()


async def test_agent_reopens_a_stream_that_gets_no_directives() -> None:
    mute = _MuteRouter()
    server = grpc.aio.server()
    capacity_pb2_grpc.add_CapacityServiceServicer_to_server(mute, server)
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    try:
        async with running_agent(port, sample_pool(), silence_timeout_s=0.3) as agent:
            await eventually(lambda: mute.streams >= 2, within=5.0, what="a second stream after silence")
            assert not agent.connected
            assert "no directive" in (agent.last_error or "")
    finally:
        await server.stop(0)
