"""Publishes the gateway's health into its `FleetgateGateway` CR's status subresource.

`kubectl get fgw` then shows endpoints / ready / stale counts, and the conditions explain why a
gateway is not Ready. Callers feed plain numbers as often as they like; the reporter patches only
when something changed and at most once per `min_interval_s`. A change that arrives inside the
interval is not lost: the latest values go out when the interval ends. API failures are logged and
retried on the next window; status reporting never disturbs serving.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Literal

import msgspec
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from cluster_gateway.k8s.crd_source import resource_label
from cluster_gateway.k8s.reflector import describe_error, in_daemon_thread
from common.config.crd import Condition, GatewayStatus
from common.config.gateway import CRD_GROUP, CRD_PLURAL, CRD_VERSION

log = logging.getLogger(__name__)

MERGE_PATCH = "application/merge-patch+json"


@dataclass(frozen=True, slots=True)
class Observation:
    """What the gateway last told the reporter (everything a status is derived from)."""

    endpoints: int
    ready: int
    stale: int
    router_connected: bool | None  # None: no global router configured
    generation: int


ConditionStatus = Literal["True", "False", "Unknown"]


@dataclass(frozen=True, slots=True)
class _Verdict:
    type: str
    status: ConditionStatus
    reason: str
    message: str


def _plural(n: int, word: str) -> str:
    return f"{n} {word}" if n == 1 else f"{n} {word}s"


def conditions_for(o: Observation) -> list[_Verdict]:
    """The four conditions, in a fixed order, derived only from the observation."""
    out = [
        _Verdict("Ready", "True", "EndpointsReady", f"{o.ready} of {_plural(o.endpoints, 'endpoint')} ready")
        if o.ready > 0
        else _Verdict(
            "Ready",
            "False",
            "NoReadyEndpoints",
            f"0 of {_plural(o.endpoints, 'endpoint')} ready: requests would be rejected with 503",
        ),
        _Verdict(
            "EndpointsDiscovered", "True", "EndpointsFound", f"{_plural(o.endpoints, 'endpoint')} discovered"
        )
        if o.endpoints > 0
        else _Verdict("EndpointsDiscovered", "False", "NoEndpoints", "discovery found no serving pods"),
        _Verdict(
            "StalePods",
            "True",
            "MetricsStale",
            f"{o.stale} of {_plural(o.endpoints, 'pod')} have stale metrics",
        )
        if o.stale > 0
        else _Verdict(
            "StalePods", "False", "MetricsFresh", f"0 of {_plural(o.endpoints, 'pod')} have stale metrics"
        ),
    ]
    if o.router_connected is None:
        out.append(
            _Verdict("GlobalRouterConnected", "Unknown", "NotConfigured", "no globalRouter in the spec")
        )
    elif o.router_connected:
        out.append(_Verdict("GlobalRouterConnected", "True", "Connected", "capacity reports are streaming"))
    else:
        out.append(
            _Verdict(
                "GlobalRouterConnected",
                "False",
                "Disconnected",
                "the capacity stream to the global router is down",
            )
        )
    return out


class StatusReporter:
    """Rate-limited, change-only writer of one CR's `status` (merge patch on the status subresource)."""

    def __init__(
        self,
        api_client: client.ApiClient,
        namespace: str,
        name: str,
        *,
        generation: int = 0,
        min_interval_s: float = 1.0,
        clock: Callable[[], float] = time.monotonic,
        wall_clock: Callable[[], datetime] = lambda: datetime.now(UTC),
    ) -> None:
        self.namespace = namespace
        self.name = name
        self.label = resource_label(namespace, name)
        self.generation = generation  # metadata.generation of the spec being served
        self.min_interval_s = min_interval_s
        self._custom = client.CustomObjectsApi(api_client)
        self._clock = clock
        self._wall_clock = wall_clock
        self._pending: Observation | None = None
        self._sent: Observation | None = None
        self._last_attempt = -float("inf")
        self._transitions: dict[str, tuple[ConditionStatus, datetime]] = {}  # type → (status, since)
        self._timer: asyncio.Task[None] | None = None
        self._lock = asyncio.Lock()
        self._last_error = ""
        self._failures = 0
        self.patches = 0  # successful patches (for tests and metrics)

    def set_generation(self, generation: int) -> None:
        """A new spec generation is now being served; the next report carries it."""
        self.generation = generation

    async def report(self, *, endpoints: int, ready: int, stale: int, router_connected: bool | None) -> None:
        """Record the latest numbers; patch now if allowed, else once the rate-limit window ends."""
        obs = Observation(endpoints, ready, stale, router_connected, self.generation)
        if obs == self._sent and self._pending is None:
            return
        self._pending = obs
        wait = self._last_attempt + self.min_interval_s - self._clock()
        if wait <= 0 and self._timer is None:
            await self._send()
        else:
            self._schedule(max(wait, 0.0))

    async def close(self) -> None:
        """Stop the deferred patch and send whatever is still pending (e.g. on shutdown)."""
        if self._timer is not None:
            self._timer.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._timer
            self._timer = None
        if self._pending is not None and self._pending != self._sent:
            await self._send()

    def _schedule(self, delay: float) -> None:
        if self._timer is None or self._timer.done():
            self._timer = asyncio.create_task(self._deferred(delay))

    async def _deferred(self, delay: float) -> None:
        await asyncio.sleep(delay)
        self._timer = None
        await self._send()

    async def _send(self) -> None:
        async with self._lock:
            obs = self._pending
            if obs is None:
                return
            if obs == self._sent:
                self._pending = None
                return
            self._last_attempt = self._clock()
            body = {"status": msgspec.to_builtins(self._status(obs))}
            try:
                await in_daemon_thread(lambda: self._patch(body), f"status-{self.label}")
            except Exception as exc:
                self._log_failure(exc)
                self._failures += 1
                # Keep `_pending` and retry; back off while the API keeps failing (e.g. CR deleted).
                self._schedule(min(30.0, self.min_interval_s * 2 ** (self._failures - 1)))
                return
            self._sent = obs
            if self._pending == obs:
                self._pending = None
            self.patches += 1
            self._failures = 0
            self._last_error = ""

    def _patch(self, body: dict[str, object]) -> None:
        self._custom.patch_namespaced_custom_object_status(
            CRD_GROUP,
            CRD_VERSION,
            self.namespace,
            CRD_PLURAL,
            self.name,
            body,
            _content_type=MERGE_PATCH,
            _request_timeout=10,
        )

    def _log_failure(self, exc: Exception) -> None:
        why = describe_error(exc)
        if isinstance(exc, ApiException) and exc.status == 404:
            why = "not found (deleted?)"
        if why != self._last_error:  # one line per distinct problem, not one per second
            log.warning("cannot update the status of %s: %s; will retry", self.label, why)
            self._last_error = why

    def _status(self, obs: Observation) -> GatewayStatus:
        now = self._wall_clock().replace(microsecond=0)
        conditions = []
        for v in conditions_for(obs):
            prev = self._transitions.get(v.type)
            since = prev[1] if prev is not None and prev[0] == v.status else now
            self._transitions[v.type] = (v.status, since)
            conditions.append(
                Condition(
                    type=v.type,
                    status=v.status,
                    reason=v.reason,
                    message=v.message,
                    last_transition_time=since,
                    observed_generation=obs.generation,
                )
            )
        return GatewayStatus(
            observed_generation=obs.generation,
            endpoints=obs.endpoints,
            ready_endpoints=obs.ready,
            stale_pods=obs.stale,
            router_connected=bool(obs.router_connected),
            conditions=conditions,
        )
