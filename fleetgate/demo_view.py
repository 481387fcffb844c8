"""The demo's live view: sample the fleet (router `/fleet`, each pod's `/admin/state`) and draw it.

Sampling and drawing are separate so the table and the one-line summary are plain functions of a
`FleetFrame`. The cluster rows show what Tier 2 believes (the agents' reports); the pod rows show what
the simulated pods actually hold, so a newcomer can watch both tiers agree.
"""

from __future__ import annotations

import asyncio
import shutil
import time
from dataclasses import dataclass, field
from typing import Any, TextIO

import httpx

from fleetgate.demo_fleet import ClusterPlan


@dataclass
class PodRow:
    name: str
    engine: str
    profile: str
    up: bool = False
    waiting: int = 0
    running: int = 0
    kv_usage: float = 0.0
    resident: list[str] = field(default_factory=list)
    requests: int = 0


@dataclass
class ClusterRow:
    cluster_id: str
    region: str
    capacity_type: str
    cost_per_gpu_hour: float
    expected_pods: int
    reported: bool = False  # the router has a report from this cluster's agent
    fresh: bool = False
    age_s: float = 0.0
    draining: bool = False
    ejected: bool = False
    ready_pods: int = 0
    queued: int = 0
    running: int = 0
    headroom: int = 0
    ttft_ms: float = 0.0
    routed: int = 0
    rate_rps: float = 0.0
    pods: list[PodRow] = field(default_factory=list)

    @property
    def state(self) -> str:
        if not self.reported:
            return "no report"
        if self.draining:
            return "draining"
        if self.ejected:
            return "ejected"
        return f"fresh {self.age_s:.1f}s" if self.fresh else f"STALE {self.age_s:.0f}s"


@dataclass
class FleetFrame:
    uptime_s: float
    clusters: list[ClusterRow]
    router_ok: bool = True
    load_line: str | None = None
    events: list[str] = field(default_factory=list)


class FleetProbe:
    """Reads the fleet over loopback HTTP, like any operator tool would."""

    def __init__(
        self,
        router_url: str,
        plans: tuple[ClusterPlan, ...],
        pod_urls: dict[str, list[str]],
        *,
        status_key: str | None = None,  # `/fleet` is private by default: the admin or a status key
    ) -> None:
        self.router_url = router_url
        self.plans = plans
        self.pod_urls = pod_urls
        self._fleet_headers = {"authorization": f"Bearer {status_key}"} if status_key else {}
        self._client = httpx.AsyncClient(timeout=httpx.Timeout(1.0), trust_env=False)

    async def aclose(self) -> None:
        await self._client.aclose()

    async def _json(self, url: str, headers: dict[str, str] | None = None) -> dict[str, Any] | None:
        try:
            r = await self._client.get(url, headers=headers)
            if r.status_code != 200:
                return None
            doc = r.json()
        except (httpx.HTTPError, ValueError):
            return None
        return doc if isinstance(doc, dict) else None

    async def sample(self, uptime_s: float) -> FleetFrame:
        pod_jobs = [
            self._json(f"{url}/admin/state") for plan in self.plans for url in self.pod_urls[plan.cluster_id]
        ]
        fleet, *states = await asyncio.gather(
            self._json(f"{self.router_url}/fleet", self._fleet_headers), *pod_jobs
        )
        reports = {c.get("id"): c for c in (fleet or {}).get("clusters", []) if isinstance(c, dict)}
        rows: list[ClusterRow] = []
        it = iter(states)
        for plan in self.plans:
            row = cluster_row(plan, reports.get(plan.cluster_id))
            for i, pod in enumerate(plan.pods):
                row.pods.append(pod_row(f"{plan.cluster_id}/{i}", pod.engine, pod.profile, next(it)))
            rows.append(row)
        return FleetFrame(uptime_s=uptime_s, clusters=rows, router_ok=fleet is not None)


def cluster_row(plan: ClusterPlan, report: dict[str, Any] | None) -> ClusterRow:
    row = ClusterRow(
        cluster_id=plan.cluster_id,
        region=plan.region,
        capacity_type=plan.capacity_type,
        cost_per_gpu_hour=plan.cost_per_gpu_hour,
        expected_pods=len(plan.pods),
    )
    if report is None:
        return row
    models = [m for m in report.get("models", {}).values() if isinstance(m, dict)]
    row.reported = True
    row.fresh = bool(report.get("fresh"))
    row.age_s = float(report.get("age_s", 0.0))
    row.draining = bool(report.get("draining")) or bool(report.get("router_drain"))
    row.ejected = float(report.get("ejected_for_s", 0.0)) > 0
    row.capacity_type = str(report.get("capacity_type") or row.capacity_type)
    row.cost_per_gpu_hour = float(report.get("cost_per_gpu_hour", row.cost_per_gpu_hour))
    row.ready_pods = max((int(m.get("ready_pods", 0)) for m in models), default=0)
    row.queued = sum(int(m.get("queued", 0)) for m in models)
    row.running = sum(int(m.get("running", 0)) for m in models)
    row.headroom = sum(int(m.get("headroom_requests", 0)) for m in models)
    row.ttft_ms = min((float(m.get("est_ttft_ms", 0.0)) for m in models), default=0.0)
    row.routed = int(report.get("requests_total", 0))
    row.rate_rps = float(report.get("rate_rps", 0.0))
    return row


def pod_row(name: str, engine: str, profile: str, state: dict[str, Any] | None) -> PodRow:
    row = PodRow(name=name, engine=engine, profile=profile)
    if state is None:
        return row
    lora = state.get("lora") or {}
    counters = state.get("counters") or {}
    row.up = True
    row.waiting = int(state.get("num_requests_waiting", 0))
    row.running = int(state.get("num_requests_running", 0))
    row.kv_usage = float(state.get("kv_cache_usage", 0.0))
    row.resident = [str(a) for a in lora.get("resident", [])]
    row.requests = sum(int(v) for v in (counters.get("request_success_total") or {}).values())
    return row


# --- drawing --------------------------------------------------------------------------------------


def _clock(seconds: float) -> str:
    s = int(seconds)
    return f"{s // 3600:02d}:{s % 3600 // 60:02d}:{s % 60:02d}"


_CLUSTER_HEAD = (
    f"{'CLUSTER':<11} {'REGION':<9} {'CAPACITY':<9} {'$/GPU-h':>7} {'READY':>5} {'QUEUE':>5} "
    f"{'RUN':>4} {'HEADROOM':>8} {'TTFT ms':>7} {'ROUTED':>6} {'REQ/s':>5}  STATE"
)
_POD_HEAD = (
    f"  {'POD':<12} {'ENGINE':<6} {'PROFILE':<15} {'QUEUE':>5} {'RUN':>4} {'KV %':>5} "
    f"{'REQS':>5}  ADAPTERS RESIDENT"
)


def render_table(frame: FleetFrame, endpoint: str) -> list[str]:
    """The full live view, one string per terminal line."""
    lines = [
        f"fleet  {endpoint}   up {_clock(frame.uptime_s)}   "
        + ("" if frame.router_ok else "ROUTER NOT ANSWERING   ")
        + "Ctrl-C stops everything",
        "",
        _CLUSTER_HEAD,
    ]
    for c in frame.clusters:
        lines.append(
            f"{c.cluster_id:<11} {c.region:<9} {c.capacity_type:<9} {c.cost_per_gpu_hour:>7.2f} "
            f"{f'{c.ready_pods}/{c.expected_pods}':>5} {c.queued:>5} {c.running:>4} {c.headroom:>8} "
            f"{c.ttft_ms:>7.0f} {c.routed:>6} {c.rate_rps:>5.1f}  {c.state}"
        )
    lines += ["", _POD_HEAD]
    for c in frame.clusters:
        for p in c.pods:
            if not p.up:
                lines.append(f"  {p.name:<12} {p.engine:<6} {p.profile:<15} {'DOWN':>5}")
                continue
            lines.append(
                f"  {p.name:<12} {p.engine:<6} {p.profile:<15} {p.waiting:>5} {p.running:>4} "
                f"{p.kv_usage * 100:>5.1f} {p.requests:>5}  {','.join(p.resident) or '-'}"
            )
    if frame.load_line:
        lines += ["", frame.load_line]
    if frame.events:
        lines += ["", "recent events:"] + [f"  {e}" for e in frame.events]
    return lines


def render_summary(frame: FleetFrame) -> str:
    """One compact line for pipes and logs."""
    parts = [f"[{_clock(frame.uptime_s)}]"]
    for c in frame.clusters:
        parts.append(
            f"{c.cluster_id} {c.ready_pods}/{c.expected_pods} ready q={c.queued} run={c.running} "
            f"routed={c.routed} {c.state}"
        )
    pod_reqs = sum(p.requests for c in frame.clusters for p in c.pods)
    parts.append(f"pod requests={pod_reqs}")
    if not frame.router_ok:
        parts.append("router not answering")
    if frame.load_line:
        parts.append(frame.load_line)
    return " | ".join(parts)


class LiveTerminal:
    """Redraws the view in place below the header: move up over the last frame, clear, print.

    Lines are cut to the terminal width so each takes exactly one row and the move-up count holds.
    """

    def __init__(self, out: TextIO) -> None:
        self.out = out
        self._rows = 0

    def draw(self, lines: list[str]) -> None:
        width, height = shutil.get_terminal_size((120, 40))
        lines = [ln[: max(width - 1, 20)] for ln in lines[: max(height - 2, 5)]]
        up = f"\x1b[{self._rows}F" if self._rows else ""
        self.out.write(up + "\x1b[J" + "\n".join(lines) + "\n")
        self.out.flush()
        self._rows = len(lines)

    def hide_cursor(self) -> None:
        self.out.write("\x1b[?25l")
        self.out.flush()

    def show_cursor(self) -> None:
        self.out.write("\x1b[?25h")
        self.out.flush()


class Clock:
    """Uptime since the fleet became ready."""

    def __init__(self) -> None:
        self.t0 = time.monotonic()

    def uptime(self) -> float:
        return time.monotonic() - self.t0
