"""Gateway-process side of the pool feed: publish the pool to workers, merge what they report."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable

from cluster_gateway.pool import EndpointPool, PodState
from cluster_gateway.workers.feed import TICK_S, PodView, Snapshot, WorkerReport, frame, read_report
from cluster_gateway.workers.metrics_feed import ProcessGroupMetrics

log = logging.getLogger("fleetgate.gateway.workers")


def pod_view(p: PodState, inflight: int) -> PodView:
    e = p.endpoint
    return PodView(
        name=p.name,
        address=e.address,
        port=e.port,
        engine=e.engine,
        labels=dict(e.labels),
        annotations=dict(e.annotations),
        metrics=p.metrics,
        consecutive_failures=p.consecutive_failures,
        stale=p.stale,
        base_models=sorted(p.base_models),
        adapters={a: p.adapter_parents.get(a, "") for a in p.adapters},
        catalog_exact=p.catalog_exact,
        inflight=inflight,
        dispatched_since_scrape=p.dispatched_since_scrape,
        ejected_until=p.ejected_until,
    )


def signature(p: PodState) -> tuple[object, ...]:
    """What a worker copies of a pod: a pod whose signature is unchanged is not sent again. The
    objects are compared by identity first (a new scrape is a new `PodMetrics`), so it is cheap."""
    return (
        p.endpoint,
        p.metrics,
        p.consecutive_failures,
        p.stale,
        p.inflight,
        p.dispatched_since_scrape,
        p.ejected_until,
        p.base_models,
        p.adapters,
        p.adapter_parents,
        p.catalog_exact,
    )


class _Worker:
    def __init__(self, writer: asyncio.StreamWriter) -> None:
        self.writer = writer
        self.needs_full = True  # it just connected: its first snapshot is the whole pool
        self.report = WorkerReport(worker=-1)
        self.releases: list[tuple[str, int]] = []  # due in this worker's next snapshot
        self.metrics_body = b""  # the group's /metrics, due in this worker's next snapshot
        self.rendering = False


class PoolPublisher:
    """Serves the feed on a Unix socket; `run()` publishes every tick until cancelled."""

    def __init__(self, pool: EndpointPool, path: str) -> None:
        self.pool = pool
        self.path = path
        self._workers: list[_Worker] = []
        self._server: asyncio.AbstractServer | None = None
        self._sent: dict[str, tuple[object, ...]] = {}  # pod → its signature in the last snapshot
        self._sent_version = -1  # the pool's membership version the last snapshot carried
        self._sent_acked: dict[int, int] = {}
        self.group = ProcessGroupMetrics()  # the workers' counters (metrics_feed.py)
        self.render: Callable[[], Awaitable[bytes]] | None = None  # the group's /metrics body
        # ext_authz releases (extauthz/release.py): this process's own picks are released by
        # `release_local`; `own_outbox` drains the releases this process saw for the workers' picks
        self.release_local: Callable[[str, int], object] | None = None
        self.own_outbox: Callable[[], list[tuple[str, int]]] | None = None

    async def start(self) -> None:
        self._server = await asyncio.start_unix_server(self._serve, path=self.path)

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        w = _Worker(writer)
        self._workers.append(w)
        try:
            while True:
                report = await read_report(reader)
                self._merge(w, report)
        except (asyncio.IncompleteReadError, ConnectionError, ValueError):
            pass
        finally:
            self._workers.remove(w)
            self._forget(w)
            writer.close()

    def _merge(self, w: _Worker, report: WorkerReport) -> None:
        """A worker's counts: remote in-flight and dispatches into the pool, its ejections too."""
        prev = w.report.inflight
        w.report = report
        if report.metrics:
            self.group.update(id(w), report.metrics)
        if report.want_metrics and not w.rendering and self.render is not None:
            w.rendering = True
            asyncio.get_running_loop().create_task(self._render_for(w, self.render))
        for name in set(prev) | set(report.inflight):
            delta = report.inflight.get(name, 0) - prev.get(name, 0)
            if delta and (pod := self.pool.get(name)) is not None:
                pod.inflight = max(pod.local_inflight, pod.inflight + delta)
        for name, n in report.dispatched.items():
            if (pod := self.pool.get(name)) is not None:
                pod.dispatched_since_scrape += n
        for name, until in report.ejected.items():
            if (pod := self.pool.get(name)) is not None and until > pod.ejected_until:
                pod.ejected_until = until
        if report.releases:
            self._route_releases(report.releases)

    def _route_releases(self, releases: list[tuple[str, int]]) -> None:
        """Hand each release to the process that holds the pick (its id names it: `<worker>.<n>`)."""
        by_worker = {w.report.worker: w for w in self._workers}
        for pick_id, status in releases:
            head = pick_id.partition(".")[0]
            owner = int(head) if head.isdigit() else -1
            if owner == 0:
                if self.release_local is not None:
                    self.release_local(pick_id, status)
            elif (w := by_worker.get(owner)) is not None:
                w.releases.append((pick_id, status))

    async def _render_for(self, w: _Worker, render: Callable[[], Awaitable[bytes]]) -> None:
        try:
            w.metrics_body = await render()
        except Exception:
            log.exception("rendering /metrics for a worker failed")
        finally:
            w.rendering = False

    def _forget(self, w: _Worker) -> None:
        """A worker left (stopped or crashed): its in-flight requests are gone with it; its
        counters stay in the group's sums."""
        self.group.retire(id(w))
        for name, n in w.report.inflight.items():
            if (pod := self.pool.get(name)) is not None:
                pod.inflight = max(pod.local_inflight, pod.inflight - n)

    def queued_by_model(self) -> dict[str, int]:
        """Requests waiting in the workers' admission queues, per requested model."""
        out: dict[str, int] = {}
        for w in self._workers:
            for model, n in w.report.queued.items():
                out[model] = out.get(model, 0) + n
        return out

    def publish(self) -> None:
        """One tick: what changed since the last one, encoded once for every worker; a worker that
        just connected gets the whole pool, one with a /metrics body or releases due its own copy."""
        if not self._workers:
            return
        if self.own_outbox is not None and (mine := self.own_outbox()):
            self._route_releases(mine)
        pods = self.pool.pods()
        version = self.pool.version
        full = version != self._sent_version
        sent = {} if full else self._sent
        changed = []
        for p in pods:
            sig = signature(p)
            if full or sent.get(p.name) != sig:
                changed.append(p)
                sent[p.name] = sig
        self._sent, self._sent_version = sent, version
        acked = {w.report.worker: w.report.seq for w in self._workers if w.report.worker >= 0}
        news = bool(changed) or acked != self._sent_acked
        self._sent_acked = acked
        views = [pod_view(p, p.inflight) for p in changed]
        every: list[PodView] | None = views if full else None
        common: bytes | None = None
        for w in self._workers:
            if w.writer.is_closing():
                continue
            if w.needs_full or w.metrics_body or w.releases:
                if w.needs_full:
                    every = every if every is not None else [pod_view(p, p.inflight) for p in pods]
                    snap = Snapshot(version, every, True, acked, w.metrics_body, w.releases)
                else:
                    snap = Snapshot(version, views, full, acked, w.metrics_body, w.releases)
                w.writer.write(frame(snap))
                w.needs_full, w.metrics_body, w.releases = False, b"", []
            elif news:
                if common is None:
                    common = frame(Snapshot(version, views, full, acked))
                w.writer.write(common)

    async def run(self) -> None:
        while True:
            self.publish()
            await asyncio.sleep(TICK_S)

    async def stop(self) -> None:
        if self._server is not None:
            self._server.close()
            for w in list(self._workers):
                w.writer.close()
            with contextlib.suppress(Exception):
                await self._server.wait_closed()
            self._server = None
