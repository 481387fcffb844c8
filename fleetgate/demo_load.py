"""`fleetgate demo --load`: a small, bounded traffic mix through the global endpoint.

Poisson arrivals at a fixed rate, at most `max_inflight` requests open at once (arrivals beyond that
are skipped, not queued, so the generator can never pile up), every request with a timeout. The mix
exercises what the fleet is for: interactive chat (some streamed) with a shared system prompt
(prefix-cache affinity) from users in every region, LoRA adapter requests (adapter affinity), and
batch completions on the batch tenant (the capacity with room that is cheapest per token).
"""

from __future__ import annotations

import asyncio
import contextlib
import random
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

import httpx

from fleetgate.demo_fleet import BASE_MODEL

SYSTEM_PROMPT = (
    "You are the support assistant of a small online bookshop. Answer briefly and politely. "
    "Orders ship within two working days; returns are free for thirty days; gift cards never expire."
)
QUESTIONS = (
    "Where is my order #1042?",
    "Can I return a book I bought last week?",
    "Do you ship to Canada?",
    "What is your most popular science fiction title?",
    "Can I change the delivery address of an order?",
    "Do gift cards expire?",
)
SQL_TASKS = (
    "Top 5 customers by revenue in 2024.",
    "Monthly order counts for the last year.",
    "Books never ordered.",
)
# Where interactive users are: the router weighs network distance to each cluster's region.
CLIENT_REGIONS: tuple[str, ...] = ("us-east", "eu-west", "ap-south")
CLIENT_REGION_WEIGHTS: tuple[float, ...] = (0.5, 0.3, 0.2)
DOCUMENT = (
    "Quarterly report. Revenue grew 12% year over year, driven by online orders and gift cards. "
    "Shipping costs fell after the new carrier contract; returns stayed under 3% of orders. "
) * 6


@dataclass(frozen=True)
class Kind:
    name: str
    weight: float
    key: str  # "api" (interactive tenant) or "batch"
    model: str
    stream: bool
    max_tokens: int


MIX: tuple[Kind, ...] = (
    Kind("chat", 0.30, "api", BASE_MODEL, False, 48),
    Kind("chat-stream", 0.20, "api", BASE_MODEL, True, 64),
    Kind("sql-lora", 0.12, "api", "sql-lora", False, 48),
    Kind("support-lora", 0.08, "api", "support-lora", True, 48),
    Kind("summarize-lora", 0.05, "api", "summarize-lora", False, 64),
    Kind("batch", 0.25, "batch", BASE_MODEL, False, 128),
)


@dataclass
class LoadStats:
    sent: int = 0
    ok: int = 0
    skipped: int = 0  # arrivals dropped because max_inflight requests were open
    inflight: int = 0
    status: Counter[int] = field(default_factory=Counter)  # non-200 answers
    errors: int = 0  # no answer at all (connection error, timeout)
    by_cluster: Counter[str] = field(default_factory=Counter)
    last_error: str = ""

    def line(self, rps: float) -> str:
        failed = sum(self.status.values()) + self.errors
        where = " ".join(f"{k}={v}" for k, v in sorted(self.by_cluster.items())) or "-"
        text = (
            f"load {rps:g} req/s: sent {self.sent} ok {self.ok} failed {failed} "
            f"skipped {self.skipped} open {self.inflight} | served by {where}"
        )
        if self.last_error:
            text += f" | last failure: {self.last_error}"
        return text


def _body(kind: Kind, rng: random.Random) -> tuple[str, dict[str, Any]]:
    if kind.name == "batch":
        prompt = f"Summarise for the weekly digest:\n{DOCUMENT}\nItem {rng.randint(1, 10_000)}:"
        return "/v1/completions", {"model": kind.model, "prompt": prompt, "max_tokens": kind.max_tokens}
    if kind.model == "sql-lora":
        user = rng.choice(SQL_TASKS)
    elif kind.model == "summarize-lora":
        user = f"Summarise: {DOCUMENT}"
    else:
        user = rng.choice(QUESTIONS)
    body: dict[str, Any] = {
        "model": kind.model,
        "messages": [{"role": "system", "content": SYSTEM_PROMPT}, {"role": "user", "content": user}],
        "max_tokens": kind.max_tokens,
    }
    if kind.stream:
        body["stream"] = True
        body["stream_options"] = {"include_usage": True}
    return "/v1/chat/completions", body


class LoadGenerator:
    def __init__(
        self,
        base_url: str,
        keys: dict[str, str],
        *,
        rps: float,
        max_inflight: int = 24,
        timeout_s: float = 60.0,
        seed: int = 0,
    ) -> None:
        if rps <= 0:
            raise ValueError("rps must be > 0")
        self.base_url = base_url
        self.keys = keys
        self.rps = rps
        self.max_inflight = max_inflight
        self.stats = LoadStats()
        self._rng = random.Random(seed)
        self._client = httpx.AsyncClient(timeout=httpx.Timeout(timeout_s, connect=2.0), trust_env=False)
        self._tasks: set[asyncio.Task[None]] = set()

    async def run(self) -> None:
        """Until cancelled; in-flight requests are cancelled with it."""
        weights = [k.weight for k in MIX]
        try:
            while True:
                await asyncio.sleep(self._rng.expovariate(self.rps))
                if len(self._tasks) >= self.max_inflight:
                    self.stats.skipped += 1
                    continue
                kind = self._rng.choices(MIX, weights)[0]
                task = asyncio.create_task(self._one(kind))
                self._tasks.add(task)
                task.add_done_callback(self._tasks.discard)
        finally:
            for t in list(self._tasks):
                t.cancel()
            for t in list(self._tasks):
                with contextlib.suppress(asyncio.CancelledError):
                    await t
            await self._client.aclose()

    async def _one(self, kind: Kind) -> None:
        path, body = _body(kind, self._rng)
        headers = {"authorization": f"Bearer {self.keys[kind.key]}"}
        if kind.key == "api":
            region = self._rng.choices(CLIENT_REGIONS, CLIENT_REGION_WEIGHTS)[0]
            headers["x-fleetgate-client-region"] = region
        st = self.stats
        st.sent += 1
        st.inflight += 1
        try:
            async with self._client.stream("POST", self.base_url + path, json=body, headers=headers) as r:
                await r.aread()
                if r.status_code == 200:
                    st.ok += 1
                    st.by_cluster[r.headers.get("x-fleetgate-cluster", "?")] += 1
                else:
                    st.status[r.status_code] += 1
                    st.last_error = f"{kind.name}: HTTP {r.status_code}"
        except httpx.HTTPError as exc:
            st.errors += 1
            st.last_error = f"{kind.name}: {type(exc).__name__}"
        finally:
            st.inflight -= 1
