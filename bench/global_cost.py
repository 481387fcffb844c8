"""The `cost` section of `bench.global_bench`: what batch shaping saves and what interactive keeps.

Three clusters like the demo's (an on-demand H100 cluster at $4.00/GPU-h, a spot A100 one at $1.30,
an on-demand L4 one at $0.80; modelsim hardware profiles) and two tenants: an interactive key
(streaming chats at a steady rate) and a batch key (longer non-streaming generations). The same
seeded load runs twice against a fresh fleet:
  * shaped — the batch tenant has `trafficClass: batch` (default weights: cost 4, headroom 1, queue 0.5);
  * cost-blind baseline — the same batch class with its cost weight set to 0, so batch is ranked on
    headroom and queue alone. Only the cost weight differs between the runs: the interactive tenant,
    its class and the batch gateway profile are identical, so a change in interactive TTFT is the
    effect of where batch went, not of a different interactive policy.

Batch cost is attributed per token: a token generated on cluster c costs
    price_c / 3600 / tok_s_c   dollars,
where price_c is the cluster's list $/GPU-hour (spot at its list price; the router's risk mark-up is
only for ranking) and tok_s_c is the decode tokens/s one GPU of that hardware profile sustains at the
batch size measured on c during the run (mean running sequences per ready pod, sampled from the
router's /fleet while the cluster was busy) and the measured mean context of requests served there
(prompt + half the output, from the responses' usage): `HardwareProfile.step_seconds` at time scale 1,
i.e. the real hardware the simulator stands for. Cost saved = 1 - shaped / baseline.
For reference the table also shows the $/Mtok the router ranked batch by: list price (spot marked up
by the default `spotDiscountRisk`) / (3600 x the agents' reported tokens/s per GPU at full concurrency,
averaged over /fleet samples); it is not used for the attribution above.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
import random
import statistics
import sys
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

from bench.global_bench import MODEL, Fleet, Row, fleet, pct
from common.config.router import Selection
from global_router.tenants import hash_key
from modelsim.profiles import HardwareProfile, get_profile

INTERACTIVE_KEY = "sk-bench-interactive"
BATCH_KEY = "sk-bench-batch"


@dataclass(frozen=True, slots=True)
class CostCluster:
    cluster_id: str
    profile: str  # modelsim hardware profile
    pods: int
    cost_per_gpu_hour: float
    capacity_type: str = "on-demand"


CLUSTERS: tuple[CostCluster, ...] = (
    CostCluster("fast-h100", "h100-llama3-8b", 2, 4.00),
    CostCluster("spot-a100", "a100-llama3-8b", 2, 1.30, "spot"),
    CostCluster("cheap-l4", "l4-llama3-8b", 2, 0.80),
)


@dataclass(frozen=True, slots=True)
class LoadSpec:
    duration_s: float
    interactive_rps: float = 2.0
    batch_rps: float = 1.5
    interactive_prompt_words: int = 120
    interactive_max_tokens: int = 48
    batch_prompt_words: int = 500
    batch_max_tokens: int = 160
    seed: int = 11


@dataclass(frozen=True, slots=True)
class Arrival:
    at_s: float
    tenant: str  # "interactive" | "batch"


def schedule(spec: LoadSpec) -> list[Arrival]:
    """Seeded Poisson arrivals per tenant, merged in time order: both runs replay the same list."""
    rng = random.Random(spec.seed)
    out: list[Arrival] = []
    for tenant, rate in (("interactive", spec.interactive_rps), ("batch", spec.batch_rps)):
        t = rng.expovariate(rate)
        while t < spec.duration_s:
            out.append(Arrival(t, tenant))
            t += rng.expovariate(rate)
    return sorted(out, key=lambda a: a.at_s)


@dataclass(slots=True)
class Outcome:
    at_s: float
    tenant: str
    status: int  # 0: transport error
    cluster: str  # x-fleetgate-cluster, "-" when unknown
    ttft_s: float | None  # streaming only: first content chunk
    e2e_s: float
    prompt_tokens: int = 0
    completion_tokens: int = 0

    @property
    def ok(self) -> bool:
        return self.status == 200


# --- cost attribution (pure) --------------------------------------------------------------------
REF_BATCH = 32  # sequences per GPU for the rate-card view: a well-fed GPU, whatever this run's load


def tokens_per_s_per_gpu(profile: HardwareProfile, batch: float, context_tokens: float) -> float:
    """Decode tokens/s of one GPU running `batch` sequences of `context_tokens` KV each (time scale 1)."""
    b = max(1, round(batch))
    ctx = max(1, round(context_tokens))
    return b / profile.step_seconds(b, b, b * ctx)


def dollars(tokens: float, cost_per_gpu_hour: float, tok_s_per_gpu: float) -> float:
    """What `tokens` cost on a GPU billed `cost_per_gpu_hour` that generates `tok_s_per_gpu`."""
    if tokens <= 0:
        return 0.0
    return tokens * cost_per_gpu_hour / (3600.0 * tok_s_per_gpu)


def tokens_by_cluster(outcomes: Iterable[Outcome], tenant: str) -> dict[str, int]:
    out: dict[str, int] = {}
    for o in outcomes:
        if o.ok and o.tenant == tenant:
            out[o.cluster] = out.get(o.cluster, 0) + o.completion_tokens
    return out


def mean_context(outcomes: Iterable[Outcome], cluster: str) -> float:
    """Mean KV context of requests served on `cluster`: prompt + half the output (decode midpoint)."""
    ctx = [o.prompt_tokens + o.completion_tokens / 2 for o in outcomes if o.ok and o.cluster == cluster]
    return statistics.fmean(ctx) if ctx else 1.0


def mean_busy_batch(samples: Sequence[float]) -> float:
    """Mean running sequences per ready pod over samples when the cluster ran anything (>= 1)."""
    busy = [s for s in samples if s > 0]
    return max(1.0, statistics.fmean(busy)) if busy else 1.0


@dataclass(slots=True)
class RunSummary:
    mode: str
    wall_s: float
    batch_tokens: dict[str, int]
    interactive_requests: dict[str, int]
    price_per_mtok: dict[str, float]  # $ per million tokens on each cluster in this run
    batch_dollars: dict[str, float]
    ttft_ms: dict[int, float]  # interactive, percentile -> ms
    errors: dict[str, int]  # tenant -> non-200 answers
    requests: dict[str, int]  # tenant -> sent
    batch_size: dict[str, float] = field(default_factory=dict)
    ref_batch_dollars: dict[str, float] = field(default_factory=dict)  # at REF_BATCH seqs/GPU
    batch_e2e_s: dict[int, float] = field(default_factory=dict)
    router_price_per_mtok: dict[str, float] = field(default_factory=dict)  # as the router ranked batch

    @property
    def batch_cost(self) -> float:
        return sum(self.batch_dollars.values())

    @property
    def ref_batch_cost(self) -> float:
        return sum(self.ref_batch_dollars.values())


def router_price_per_mtok(c: CostCluster, reported_tok_s_per_gpu: Sequence[float]) -> float | None:
    """$/Mtok as the router ranks it (module docstring); None when the agent reported no throughput."""
    rates = [r for r in reported_tok_s_per_gpu if r > 0]
    if not rates:
        return None
    price = c.cost_per_gpu_hour * (1.0 + Selection().spot_discount_risk if c.capacity_type == "spot" else 1.0)
    return dollars(1e6, price, statistics.fmean(rates))


def summarise(
    mode: str,
    outcomes: Sequence[Outcome],
    clusters: Sequence[CostCluster],
    running_per_pod: Mapping[str, Sequence[float]],
    wall_s: float,
    reported_tok_s_per_gpu: Mapping[str, Sequence[float]] | None = None,
) -> RunSummary:
    """Everything the table and the plot need from one run; no I/O."""
    batch_tokens = tokens_by_cluster(outcomes, "batch")
    price: dict[str, float] = {}
    spend: dict[str, float] = {}
    ref_spend: dict[str, float] = {}
    sizes: dict[str, float] = {}
    batch_ctx = [o.prompt_tokens + o.completion_tokens / 2 for o in outcomes if o.ok and o.tenant == "batch"]
    ref_ctx = statistics.fmean(batch_ctx) if batch_ctx else 1.0
    for c in clusters:
        cid, profile, tokens = c.cluster_id, get_profile(c.profile), batch_tokens.get(c.cluster_id, 0)
        sizes[cid] = mean_busy_batch(running_per_pod.get(cid, ()))
        tps = tokens_per_s_per_gpu(profile, sizes[cid], mean_context(outcomes, cid))
        price[cid] = dollars(1e6, c.cost_per_gpu_hour, tps)
        spend[cid] = dollars(tokens, c.cost_per_gpu_hour, tps)
        ref_tps = tokens_per_s_per_gpu(profile, min(REF_BATCH, profile.max_num_seqs), ref_ctx)
        ref_spend[cid] = dollars(tokens, c.cost_per_gpu_hour, ref_tps)
    ttft = [o.ttft_s for o in outcomes if o.ok and o.tenant == "interactive" and o.ttft_s is not None]
    router_price = {
        c.cluster_id: p
        for c in clusters
        if (p := router_price_per_mtok(c, (reported_tok_s_per_gpu or {}).get(c.cluster_id, ()))) is not None
    }
    inter: dict[str, int] = {}
    for o in outcomes:
        if o.ok and o.tenant == "interactive":
            inter[o.cluster] = inter.get(o.cluster, 0) + 1
    return RunSummary(
        mode=mode,
        wall_s=wall_s,
        batch_tokens=batch_tokens,
        interactive_requests=inter,
        price_per_mtok=price,
        batch_dollars=spend,
        ttft_ms={q: pct(ttft, q) * 1e3 for q in (50, 90, 99)},
        errors={t: sum(1 for o in outcomes if o.tenant == t and not o.ok) for t in ("interactive", "batch")},
        requests={t: sum(1 for o in outcomes if o.tenant == t) for t in ("interactive", "batch")},
        batch_size=sizes,
        ref_batch_dollars=ref_spend,
        batch_e2e_s={
            q: pct([o.e2e_s for o in outcomes if o.ok and o.tenant == "batch"], q) for q in (50, 99)
        },
        router_price_per_mtok=router_price,
    )


def _share(part: int, whole: int) -> str:
    return f"{part / whole * 100:.0f}%" if whole else "-"


def cost_rows(shaped: RunSummary, baseline: RunSummary, clusters: Sequence[CostCluster]) -> list[Row]:
    """The section's table rows: batch placement and $ per cluster, savings, interactive latency."""
    rows: list[Row] = []
    tot_s, tot_b = sum(shaped.batch_tokens.values()), sum(baseline.batch_tokens.values())
    for c in clusters:
        cid = c.cluster_id
        ts, tb = shaped.batch_tokens.get(cid, 0), baseline.batch_tokens.get(cid, 0)
        rows.append(
            Row(
                "cost",
                f"batch tokens on {cid} ({c.capacity_type} ${c.cost_per_gpu_hour:.2f}/GPU-h), shaped vs baseline",
                f"{_share(ts, tot_s)} vs {_share(tb, tot_b)}",
                f"{ts} vs {tb} tokens",
            )
        )
        rows.append(
            Row(
                "cost",
                f"batch $ on {cid}, shaped vs baseline",
                f"{shaped.batch_dollars[cid]:.5f} vs {baseline.batch_dollars[cid]:.5f}",
                f"${shaped.price_per_mtok[cid]:.3f} vs ${baseline.price_per_mtok[cid]:.3f} per Mtok "
                f"(batch {shaped.batch_size[cid]:.1f} vs {baseline.batch_size[cid]:.1f} seqs/GPU)",
            )
        )
    if shaped.router_price_per_mtok:
        rows.append(
            Row(
                "cost",
                "batch $/Mtok the router ranked by, shaped run",
                ", ".join(
                    f"{c.cluster_id} ${shaped.router_price_per_mtok[c.cluster_id]:.3f}"
                    for c in clusters
                    if c.cluster_id in shaped.router_price_per_mtok
                ),
                "$/GPU-h (spot x risk) / agents' reported tok/s per GPU at full concurrency",
            )
        )
    saved = 1.0 - shaped.batch_cost / baseline.batch_cost if baseline.batch_cost > 0 else float("nan")
    per_tok_s = shaped.batch_cost / tot_s * 1e6 if tot_s else float("nan")
    per_tok_b = baseline.batch_cost / tot_b * 1e6 if tot_b else float("nan")
    rows.append(
        Row(
            "cost",
            "batch $ total, shaped vs baseline",
            f"{shaped.batch_cost:.5f} vs {baseline.batch_cost:.5f}",
            f"${per_tok_s:.3f} vs ${per_tok_b:.3f} per Mtok",
        )
    )
    rows.append(
        Row(
            "cost",
            "batch cost saved (1 - shaped/baseline)",
            f"{saved * 100:.1f}%",
            "at the batch size each cluster ran in the run",
        )
    )
    ref_saved = (
        1.0 - shaped.ref_batch_cost / baseline.ref_batch_cost if baseline.ref_batch_cost > 0 else float("nan")
    )
    rows.append(
        Row(
            "cost",
            f"batch cost saved at rate-card throughput ({REF_BATCH} seqs/GPU everywhere)",
            f"{ref_saved * 100:.1f}%",
            f"${shaped.ref_batch_cost:.5f} vs ${baseline.ref_batch_cost:.5f}: "
            "the same tokens priced as if every GPU ran equally busy: placement alone, no packing effect",
        )
    )
    rows.append(
        Row(
            "cost",
            "batch latency p50 / p99 (s), shaped vs baseline",
            f"{shaped.batch_e2e_s[50]:.1f} / {shaped.batch_e2e_s[99]:.1f} vs "
            f"{baseline.batch_e2e_s[50]:.1f} / {baseline.batch_e2e_s[99]:.1f}",
            "non-streaming, whole answer",
        )
    )
    for q in (50, 90, 99):
        rows.append(
            Row(
                "cost",
                f"interactive TTFT p{q} (ms), shaped vs baseline",
                f"{shaped.ttft_ms[q]:.0f} vs {baseline.ttft_ms[q]:.0f}",
                "streaming, first content chunk at the client",
            )
        )
    for s in (shaped, baseline):
        share = ", ".join(
            f"{c.cluster_id} {_share(s.interactive_requests.get(c.cluster_id, 0), sum(s.interactive_requests.values()))}"
            for c in clusters
        )
        rows.append(Row("cost", f"interactive requests per cluster, {s.mode}", share, ""))
        rows.append(
            Row(
                "cost",
                f"errors, {s.mode} (interactive / batch)",
                f"{s.errors['interactive']} / {s.errors['batch']}",
                f"of {s.requests['interactive']} / {s.requests['batch']} requests; run {s.wall_s:.0f} s",
            )
        )
    return rows


# --- the load -------------------------------------------------------------------------------------
_words = itertools.count()


def _body(tenant: str, spec: LoadSpec) -> dict[str, Any]:
    """A distinct prompt per request (no prefix-cache affinity muddling the placement)."""
    n = next(_words)
    if tenant == "interactive":
        words, max_tokens, stream = spec.interactive_prompt_words, spec.interactive_max_tokens, True
    else:
        words, max_tokens, stream = spec.batch_prompt_words, spec.batch_max_tokens, False
    text = " ".join(f"w{n}x{i}" for i in range(words))
    body: dict[str, Any] = {
        "model": MODEL,
        "messages": [{"role": "user", "content": text}],
        "max_tokens": max_tokens,
        "stream": stream,
    }
    if stream:
        body["stream_options"] = {"include_usage": True}
    return body


def _unary(body: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in body.items() if k != "stream_options"} | {"stream": False}


def _usage(obj: Any) -> tuple[int, int]:
    u = obj.get("usage") if isinstance(obj, dict) else None
    if not isinstance(u, dict):
        return 0, 0
    return int(u.get("prompt_tokens") or 0), int(u.get("completion_tokens") or 0)


async def _one(c: httpx.AsyncClient, url: str, a: Arrival, spec: LoadSpec) -> Outcome:
    key = INTERACTIVE_KEY if a.tenant == "interactive" else BATCH_KEY
    headers = {"authorization": f"Bearer {key}"}
    body = _body(a.tenant, spec)
    t0 = time.perf_counter()
    try:
        if not body["stream"]:
            r = await c.post(url, json=body, headers=headers)
            p, n = _usage(r.json()) if r.status_code == 200 else (0, 0)
            cl = r.headers.get("x-fleetgate-cluster", "-")
            return Outcome(a.at_s, a.tenant, r.status_code, cl, None, time.perf_counter() - t0, p, n)
        ttft: float | None = None
        p = n = 0
        async with c.stream("POST", url, json=body, headers=headers) as r:
            cl = r.headers.get("x-fleetgate-cluster", "-")
            if r.status_code != 200:
                await r.aread()
                return Outcome(a.at_s, a.tenant, r.status_code, cl, None, time.perf_counter() - t0)
            async for line in r.aiter_lines():
                if not line.startswith("data: ") or line == "data: [DONE]":
                    continue
                obj = json.loads(line[6:])
                if "error" in obj:
                    return Outcome(a.at_s, a.tenant, 502, cl, ttft, time.perf_counter() - t0)
                choices = obj.get("choices") or []
                if ttft is None and choices and (choices[0].get("delta") or {}).get("content"):
                    ttft = time.perf_counter() - t0
                if obj.get("usage"):
                    p, n = _usage(obj)
        return Outcome(a.at_s, a.tenant, 200, cl, ttft, time.perf_counter() - t0, p, n)
    except (httpx.HTTPError, ValueError):
        return Outcome(a.at_s, a.tenant, 0, "-", None, time.perf_counter() - t0)


async def _sample_running(
    c: httpx.AsyncClient,
    router_url: str,
    out: dict[str, list[float]],
    stop: asyncio.Event,
    rates: dict[str, list[float]] | None = None,
) -> None:
    """Running sequences per ready pod, per cluster, as the router sees them (every 0.5 s); `rates`
    collects the reported tokens/s per GPU the router prices batch by."""
    while not stop.is_set():
        try:
            doc = (await c.get(router_url + "/fleet", timeout=2)).json()
            for cl in doc["clusters"]:
                m = cl["models"].get(MODEL)
                if m and m["ready_pods"]:
                    out.setdefault(cl["id"], []).append(m["running"] / m["ready_pods"])
                    if rates is not None:
                        rates.setdefault(cl["id"], []).append(float(m.get("gpu_tokens_per_s", 0.0)))
        except (httpx.HTTPError, ValueError, KeyError):
            pass
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(stop.wait(), 0.5)


async def drive(
    router_url: str,
    spec: LoadSpec,
    mode: str,
    drain_s: float,
    rates: dict[str, list[float]] | None = None,
) -> tuple[list[Outcome], dict[str, list[float]], float]:
    """Open-loop replay of the schedule; in-flight requests get `drain_s` to finish, then count as errors."""
    arrivals = schedule(spec)
    url = router_url + "/v1/chat/completions"
    running: dict[str, list[float]] = {}
    stop = asyncio.Event()
    limits = httpx.Limits(max_connections=1024, max_keepalive_connections=256)
    async with httpx.AsyncClient(
        timeout=httpx.Timeout(spec.duration_s + drain_s, connect=5), limits=limits
    ) as c:
        sampler = asyncio.create_task(_sample_running(c, router_url, running, stop, rates))
        t0 = time.perf_counter()
        tasks: list[asyncio.Task[Outcome]] = []
        next_note = 5.0
        for a in arrivals:
            delay = a.at_s - (time.perf_counter() - t0)
            if delay > 0:
                await asyncio.sleep(delay)
            tasks.append(asyncio.create_task(_one(c, url, a, spec)))
            if a.at_s >= next_note:
                done = [t.result() for t in tasks if t.done()]
                print(
                    f"[cost/{mode}] {a.at_s:5.1f}/{spec.duration_s:.0f}s sent {len(tasks)}/{len(arrivals)}, "
                    f"done {len(done)}, errors {sum(1 for o in done if not o.ok)}",
                    file=sys.stderr,
                    flush=True,
                )
                next_note += 5.0
        print(
            f"[cost/{mode}] all sent; draining {sum(1 for t in tasks if not t.done())} in flight",
            file=sys.stderr,
            flush=True,
        )
        finished, pending = await asyncio.wait(tasks, timeout=drain_s)
        for t in pending:
            t.cancel()
        wall = time.perf_counter() - t0
        stop.set()
        await sampler
    outcomes = [t.result() for t in finished]
    outcomes += [
        Outcome(arrivals[i].at_s, arrivals[i].tenant, 0, "-", None, wall)
        for i, t in enumerate(tasks)
        if t in pending
    ]
    outcomes.sort(key=lambda o: o.at_s)
    return outcomes, running, wall


def router_sections(cost_blind: bool) -> tuple[list[dict[str, Any]], dict[str, Any] | None]:
    """Tenants and selection for one run: only the batch class's cost weight differs."""
    tenants = [
        {"name": "interactive", "apiKeySha256": [hash_key(INTERACTIVE_KEY)], "trafficClass": "interactive"},
        {"name": "batch", "apiKeySha256": [hash_key(BATCH_KEY)], "trafficClass": "batch"},
    ]
    if not cost_blind:
        return tenants, None
    selection = {
        "classes": {
            "interactive": {"ttftTargetMs": 800.0, "gatewayProfile": "latency"},
            "batch": {
                "weights": {"headroom": 1.0, "queue": 0.5, "ttft": 0.0, "region": 0.0, "cost": 0.0},
                "gatewayProfile": "throughput",
            },
        }
    }
    return tenants, selection


async def _run(mode: str, cost_blind: bool, spec: LoadSpec, time_scale: float, drain_s: float) -> RunSummary:
    tenants, selection = router_sections(cost_blind)
    ids = [c.cluster_id for c in CLUSTERS]
    print(f"[cost/{mode}] starting router and {len(ids)} clusters", file=sys.stderr, flush=True)
    with fleet(ids, tenants=tenants, selection=selection) as f:
        _start(f, time_scale)
        await asyncio.to_thread(f.wait_fresh, ids, 60.0)
        await warm_up(f, spec)
        rates: dict[str, list[float]] = {}
        outcomes, running, wall = await drive(f.router_url, spec, mode, drain_s, rates)
    return summarise(mode, outcomes, CLUSTERS, running, wall, rates)


async def warm_up(f: Fleet, spec: LoadSpec, per_pod: int = 3) -> None:
    """A few interactive-shaped requests straight to each cluster's gateway (not via the router), so
    every agent reports its pods' measured speed, as in a fleet that has been serving for a while.
    Without it an idle cluster reports the agent's prior (80 ms TTFT for any hardware) and the run
    measures the estimates' cold start instead of the routing policy."""
    async with httpx.AsyncClient(timeout=60) as c:

        async def one(url: str) -> None:
            with contextlib.suppress(httpx.HTTPError):
                (await c.post(url, json=_unary(_body("interactive", spec)))).raise_for_status()

        for cl in f.clusters:
            pods = next(c.pods for c in CLUSTERS if c.cluster_id == cl.cluster_id)
            await asyncio.gather(*(one(cl.url + "/v1/chat/completions") for _ in range(per_pod * pods)))
    await asyncio.sleep(1.5)  # a few scrape + report rounds
    print(f"[cost] warmed up {', '.join(cl.cluster_id for cl in f.clusters)}", file=sys.stderr, flush=True)


def _start(f: Fleet, time_scale: float) -> None:
    for c in CLUSTERS:
        f.start_cluster(
            c.cluster_id,
            c.pods,
            time_scale,
            c.cost_per_gpu_hour,
            profile=c.profile,
            capacity_type=c.capacity_type,
        )


async def section_cost(quick: bool, plot_dir: Path | None = None, stem: str = "global") -> list[Row]:
    spec = LoadSpec(duration_s=30.0 if quick else 60.0)
    time_scale, drain_s = 1.0, 60.0
    shaped = await _run("shaped", False, spec, time_scale, drain_s)
    baseline = await _run("baseline", True, spec, time_scale, drain_s)
    rows = cost_rows(shaped, baseline, CLUSTERS)
    if plot_dir is not None:
        from bench.plots import cost_bars

        path = plot_dir / f"{stem}_cost.png"
        cost_bars([c.cluster_id for c in CLUSTERS], shaped.batch_tokens, baseline.batch_tokens, path)
        print(f"[cost] wrote {path}", file=sys.stderr, flush=True)
    return rows
