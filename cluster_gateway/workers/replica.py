"""Worker side of the pool feed: keep a replica of the gateway's pool, report this worker's counts.

A snapshot carries each changed pod's *total* in-flight count and which of this worker's reports
that total includes (`acked`); the replica subtracts that report's counts, so its `inflight =
local_inflight + the other processes'`: exact for this worker, about one tick late for the rest.
Ejections are the union of the gateway's and this worker's own.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable

from cluster_gateway.pool import Endpoint, EndpointPool, PodState
from cluster_gateway.workers.feed import TICK_S, Snapshot, WorkerReport, frame, read_snapshot
from cluster_gateway.workers.metrics_feed import SHIP_EVERY_TICKS, ShippedSample

log = logging.getLogger("fleetgate.gateway.worker")

MAX_UNACKED = 64  # reports kept until the gateway says which one it counted (a few ticks' worth)


class PoolReplica:
    """Connects to the gateway's feed and keeps `pool` in step; reports every tick."""

    def __init__(
        self,
        pool: EndpointPool,
        path: str,
        worker: int,
        queued: Callable[[], dict[str, int]],
        metrics: Callable[[], list[ShippedSample]] | None = None,
        releases: tuple[Callable[[], list[tuple[str, int]]], Callable[[str, int], object]] | None = None,
    ) -> None:
        self.pool = pool
        self.path = path
        self.worker = worker
        self._queued = queued
        self._metrics = metrics  # this worker's counter samples, shipped ~1/s (metrics_feed.py)
        # ext_authz (extauthz/release.py): (drain the releases seen here for other processes' picks,
        # release one of this worker's own picks)
        self._releases = releases
        self._ticks = 0
        self._group_body: asyncio.Future[bytes] | None = None
        self._sent_dispatches: dict[str, int] = {}
        self._seq = 0
        self._last: WorkerReport | None = None  # the last report sent
        self._unacked: dict[int, dict[str, int]] = {}  # seq → the in-flight counts that report sent
        self._acked: dict[str, int] = {}  # this worker's counts inside the gateway's totals
        self._totals: dict[str, int] = {}  # pod → every process's in-flight, as last published
        self.synced = asyncio.Event()  # the first snapshot arrived

    def _unreported(self, pod: PodState) -> int:
        """This worker's dispatches to `pod` since its last report (a pod discovered again starts
        a new count: what was sent for its old self does not apply)."""
        return max(0, pod.dispatched_total - self._sent_dispatches.get(pod.name, 0))

    def apply(self, snap: Snapshot) -> None:
        """Copy the gateway's view into the replica, keeping what only this worker knows: its own
        in-flight requests, and its dispatches the gateway has not counted yet (they stay in the
        burst guard)."""
        pool = self.pool
        if snap.full:
            endpoints = {
                v.name: Endpoint(v.name, v.address, v.port, v.engine, v.labels, v.annotations)
                for v in snap.pods
            }
            if {p.name: p.endpoint for p in pool.pods()} != endpoints:
                pool.set_endpoints(endpoints.values())
            self._totals = {}
        seq = snap.acked.get(self.worker)
        own = self._unacked.get(seq, self._acked) if seq is not None else {}
        if seq is not None:
            self._unacked = {s: counts for s, counts in self._unacked.items() if s > seq}
        before, self._acked = self._acked, own
        touched = {n for n in before.keys() | own.keys() if before.get(n, 0) != own.get(n, 0)}
        for v in snap.pods:
            pod = pool.get(v.name)
            if pod is None:
                continue
            touched.add(v.name)
            self._totals[v.name] = v.inflight
            pod.metrics = v.metrics
            pod.consecutive_failures = v.consecutive_failures
            pod.stale = v.stale
            pod.dispatched_since_scrape = v.dispatched_since_scrape + self._unreported(pod)
            if v.ejected_until > pod.ejected_until:
                pod.ejected_until = v.ejected_until
            if v.catalog_exact:
                pool.set_catalog(v.name, v.base_models, v.adapters)
            elif v.base_models:
                pool.set_models(v.name, v.base_models)
        for name in touched:
            if (pod := pool.get(name)) is not None:
                others = self._totals.get(name, 0) - own.get(name, 0)
                pod.inflight = pod.local_inflight + max(0, others)

    def report(self) -> WorkerReport | None:
        """This worker's counts, or None when it has nothing new to say (no report is sent)."""
        inflight: dict[str, int] = {}
        ejected: dict[str, float] = {}
        pods = self.pool.pods()
        for p in pods:
            if p.local_inflight:
                inflight[p.name] = p.local_inflight
            if p.ejected_until:
                ejected[p.name] = p.ejected_until
        sent = self._sent_dispatches
        dispatched = {p.name: d for p in pods if (d := p.dispatched_total - sent.get(p.name, 0)) > 0}
        self._sent_dispatches = {p.name: p.dispatched_total for p in pods}  # pods that left drop out
        report = WorkerReport(self.worker, 0, inflight, dispatched, self._queued(), ejected)
        if self._releases is not None:
            report.releases = self._releases[0]()
        self._ticks += 1
        want = self._group_body is not None and not self._group_body.done()
        if self._metrics is not None and (want or self._ticks % SHIP_EVERY_TICKS == 0):
            report.want_metrics, report.metrics = want, self._metrics()
        last = self._last
        if (
            last is not None
            and not (dispatched or report.releases or report.metrics or report.want_metrics)
            and (inflight, report.queued, ejected) == (last.inflight, last.queued, last.ejected)
        ):
            return None
        self._seq += 1
        report.seq = self._seq
        self._last = report
        self._unacked[self._seq] = inflight
        if len(self._unacked) > MAX_UNACKED:  # the gateway is far behind: keep the newest
            del self._unacked[min(self._unacked)]
        return report

    async def group_metrics(self, timeout_s: float = 5.0) -> bytes:
        """The whole gateway's /metrics body, rendered by the gateway process (metrics_feed.py)."""
        if self._group_body is None or self._group_body.done():
            self._group_body = asyncio.get_running_loop().create_future()
        return await asyncio.wait_for(asyncio.shield(self._group_body), timeout_s)

    async def run(self) -> None:
        """Until cancelled; a lost feed (the gateway process went away) ends the worker."""
        reader, writer = await asyncio.open_unix_connection(self.path)

        async def send_reports() -> None:
            while True:
                if (report := self.report()) is not None:
                    writer.write(frame(report))
                await asyncio.sleep(TICK_S)

        sender = asyncio.create_task(send_reports())
        try:
            while True:
                snap = await read_snapshot(reader)
                self.apply(snap)
                if snap.releases and self._releases is not None:
                    for pick_id, status in snap.releases:
                        self._releases[1](pick_id, status)
                if snap.metrics and self._group_body is not None and not self._group_body.done():
                    self._group_body.set_result(snap.metrics)
                self.synced.set()
        finally:
            sender.cancel()
            writer.close()
