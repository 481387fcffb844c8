"""The capacity streams run on their own loop: a data loop held busy does not starve them.

Under saturation the router's data loop runs every callback late; before the control thread, the
directives stopped, agents reconnected and the router dropped their clusters (`model_not_found`).
Here the data loop is held for a whole busy spell by CPU work that never awaits, while an agent in
another thread reports every 100 ms: every report is answered within the spell, and the fleet view
has the latest report once the loop is free again.
"""

from __future__ import annotations

import asyncio
import itertools
import queue
import threading
import time
from collections.abc import Iterator

import grpc

from common.proto.fleetgate.v1 import capacity_pb2, capacity_pb2_grpc
from tests.eventually import eventually
from tests.global_router.integration.fleet_harness import agent_token, router_config, start_router

BUSY_S = 2.0
INTERVAL_S = 0.1


def _report(seq: int) -> capacity_pb2.CapacityReport:
    return capacity_pb2.CapacityReport(
        cluster_id="c1",
        region="r",
        gateway_url="http://127.0.0.1:1",
        sequence=seq,
        models=[capacity_pb2.ModelCapacity(model="m", ready_pods=1, kv_headroom=0.5, headroom_requests=seq)],
    )


class _Agent(threading.Thread):
    """A blocking gRPC client: one report every INTERVAL_S, each directive's arrival recorded."""

    def __init__(self, port: int, reports: int) -> None:
        super().__init__(daemon=True)
        self.port, self.reports = port, reports
        self.acks: list[tuple[float, int]] = []
        self.error: BaseException | None = None
        self._answered: queue.Queue[int] = queue.Queue()
        self.stop = threading.Event()

    def _requests(self) -> Iterator[capacity_pb2.CapacityReport]:
        for seq in range(1, self.reports + 1):
            if self.stop.is_set():
                return
            yield _report(seq)
            try:  # one report in flight at a time, like the real agent
                self._answered.get(timeout=10)
            except queue.Empty:
                return
            time.sleep(INTERVAL_S)

    def run(self) -> None:
        md = (("authorization", f"Bearer {agent_token('c1')}"),)
        try:
            with grpc.insecure_channel(f"127.0.0.1:{self.port}") as ch:
                stub = capacity_pb2_grpc.CapacityServiceStub(ch)
                for d in stub.Report(self._requests(), metadata=md, timeout=60):
                    self.acks.append((time.monotonic(), d.ack.sequence))
                    self._answered.put(d.ack.sequence)
        except BaseException as exc:  # reported by the test
            self.error = exc


async def test_directives_keep_flowing_while_the_data_loop_is_busy() -> None:
    router = await start_router(router_config(["c1"], stale_after_s=30.0))
    agent = _Agent(router.grpc_port, reports=1000)
    try:
        agent.start()
        await eventually(lambda: router.fleet.get("c1") is not None, within=20, what="the first report")
        before = len(agent.acks)
        start = time.monotonic()
        while time.monotonic() - start < BUSY_S:  # the data loop never yields for the whole spell
            sum(range(2000))
        end = time.monotonic()
        during = [t for t, _ in agent.acks if start <= t <= end]
        assert agent.error is None, agent.error
        # ~20 reports fit in the spell; on a loaded machine fewer, but never none
        assert len(during) >= 3, (before, len(agent.acks), during)
        gaps = [b - a for a, b in itertools.pairwise(during)]
        assert max(gaps, default=0.0) < 1.5, gaps
        last_ack = agent.acks[-1][1]
        # once the loop is free, the fleet view catches up on the newest figures
        await eventually(
            lambda: (
                (st := router.fleet.get("c1")) is not None and st.models["m"].headroom_requests >= last_ack
            ),
            within=10,
            what="the latest report applied",
        )
    finally:
        agent.stop.set()
        await router.stop()
        await asyncio.to_thread(agent.join, 10)
