"""The request-path glue both data paths share: parse → schedule (with admission) → account.

The embedded proxy and the Envoy ext_proc picker differ only in how bytes travel; choosing a pod,
queueing under saturation, in-flight counting and metrics are the same code, so the two paths
cannot drift apart.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import dataclass, field

from cluster_gateway.observability import GatewayMetrics, tracer
from cluster_gateway.pool import EndpointPool, PodState
from cluster_gateway.request_path.admission import AdmissionQueue
from cluster_gateway.scheduling.scheduler import Scheduler
from cluster_gateway.scheduling.types import LLMRequest, ScheduleResult
from common.openai_request import ParsedRequest
from common.telemetry import data_path_span, in_client_trace


@dataclass(slots=True)
class Pick:
    """One scheduled request: the ranked pods to try and what the scheduler decided."""

    request: LLMRequest
    result: ScheduleResult
    queued_s: float = 0.0
    profile: str = field(init=False)

    def __post_init__(self) -> None:
        self.profile = self.result.profile

    @property
    def pods(self) -> list[PodState]:
        return self.result.pods


class Dispatcher:
    """Schedules requests and keeps the pool's in-flight counts and the admission queue in step."""

    def __init__(
        self,
        pool: EndpointPool,
        scheduler: Scheduler,
        admission: AdmissionQueue[ScheduleResult],
        metrics: GatewayMetrics,
    ) -> None:
        self.pool = pool
        self.scheduler = scheduler
        self.admission = admission
        self.metrics = metrics

    def _schedule(self, req: LLMRequest) -> ScheduleResult:
        t0 = time.perf_counter()
        try:
            return self.scheduler.schedule(req)
        finally:
            self.metrics.pick_latency.observe(time.perf_counter() - t0)

    async def pick(self, parsed: ParsedRequest, headers: Mapping[str, str]) -> Pick:
        """Choose pods for a request; waits in the admission queue when every pod is saturated.

        Raises OpenAIError: 404 unknown model, 503 no usable endpoint, 429 shed by admission.
        """
        req = LLMRequest.from_parsed(parsed, headers)
        with data_path_span(tracer, "gateway.pick") as span:
            span.set_attribute("fleetgate.model", req.model)
            t0 = time.monotonic()
            result = await self.admission.admit(
                req.model,
                lambda: self._schedule(req),
                lambda r: r.saturated,
                lambda r: req.sheddable or r.sheddable,
            )
            queued = time.monotonic() - t0
            if queued > 0.001:
                self.metrics.queue_wait.observe(queued)
            span.set_attribute("fleetgate.profile", result.profile)
            span.set_attribute("fleetgate.pod", result.pods[0].name)
            return Pick(req, result, queued)

    async def pick_in_trace(self, parsed: ParsedRequest, headers: Mapping[str, str]) -> Pick:
        """`pick` under the client's trace context from `headers`: the Envoy pickers, whose request
        as a whole is Envoy's, join the client's trace for the pick alone. Without a `traceparent`
        there is no trace to join (`headers` has lower-case names, as for `pick`)."""
        with in_client_trace(headers):
            return await self.pick(parsed, headers)

    def dispatched(self, pick: Pick, pod: PodState) -> None:
        """The request is being sent to `pod`: count it in flight and teach the prefix index."""
        self.pool.acquire(pod.name)
        self.scheduler.on_dispatch(pick.request, pod)

    def completed(self, pick: Pick, pod: PodState, outcome: str) -> None:
        """The request ended on `pod` with `outcome` (the scheduler's plugins' `on_complete`)."""
        self.scheduler.on_complete(pick.request, pod, outcome)

    def finished(self, pod: PodState) -> None:
        """Release the in-flight slot taken by `dispatched` and let queued requests re-check."""
        self.pool.release(pod.name)
        self.admission.notify()
