"""A picker over a hand-built pool, served by a real grpc.aio server on loopback."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator
from dataclasses import dataclass

import grpc
import pytest

from cluster_gateway.auth import GatewayAuthenticator
from cluster_gateway.extproc.server import ExtProcServer, PickerService
from cluster_gateway.observability import GatewayMetrics
from cluster_gateway.pool import Endpoint, EndpointPool, PodMetrics
from cluster_gateway.request_path.admission import AdmissionQueue
from cluster_gateway.request_path.dispatch import Dispatcher
from cluster_gateway.scheduling.scheduler import Scheduler
from cluster_gateway.scheduling.types import ScheduleResult
from common.config.gateway import Admission, ExtProc, Scheduling

MODEL = "meta-llama/Llama-3.1-8B-Instruct"


def add_pod(pool: EndpointPool, name: str, port: int, *, waiting: int = 0, kv: float = 0.1) -> None:
    pool.upsert(Endpoint(name=name, address="127.0.0.1", port=port, engine="vllm"))
    pool.set_models(name, [MODEL])
    pool.record_scrape(
        name, PodMetrics(engine="vllm", waiting=waiting, running=1, kv_usage=kv, scraped_at=time.monotonic())
    )


def inflight(pool: EndpointPool, name: str) -> int:
    pod = pool.get(name)
    assert pod is not None, name
    return pod.inflight


@dataclass
class Picker:
    pool: EndpointPool
    service: PickerService
    port: int
    metrics: GatewayMetrics

    @property
    def target(self) -> str:
        return f"127.0.0.1:{self.port}"


async def start_picker(
    pool: EndpointPool,
    admission: Admission | None = None,
    fallbacks: int = 2,
    credentials: grpc.ServerCredentials | None = None,
    auth: GatewayAuthenticator | None = None,
) -> tuple[Picker, ExtProcServer]:
    adm = admission or Admission()
    metrics = GatewayMetrics()
    sched = Scheduler(pool, Scheduling(), staleness_s=60.0)
    queue: AdmissionQueue[ScheduleResult] = AdmissionQueue(adm.queue_size, adm.queue_timeout_ms / 1000)
    dispatcher = Dispatcher(pool, sched, queue, metrics)
    service = PickerService(
        pool,
        dispatcher,
        metrics,
        ExtProc(enabled=True, fallback_endpoints=fallbacks),
        max_body_bytes=4096,
        auth=auth,
    )
    server = ExtProcServer(service, credentials)
    port = await server.start("127.0.0.1", 0)
    return Picker(pool, service, port, metrics), server


@pytest.fixture
async def picker() -> AsyncIterator[Picker]:
    pool = EndpointPool()
    add_pod(pool, "busy", 9001, waiting=30, kv=0.7)
    add_pod(pool, "idle", 9002, waiting=0, kv=0.05)
    add_pod(pool, "mid", 9003, waiting=3, kv=0.4)
    p, server = await start_picker(pool)
    yield p
    await server.stop(0)
