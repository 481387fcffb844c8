"""Shared by the fault tests: bounded load, condition waits and checks on what a client saw."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import httpx

from tests.cluster_gateway.integration.conftest import chat


async def until(cond: Callable[[], bool], within_s: float, what: str) -> float:
    """Poll `cond` until true; returns the seconds it took (AssertionError past the deadline)."""
    t0 = time.monotonic()
    while not cond():
        if time.monotonic() - t0 > within_s:
            raise AssertionError(f"{what}: not within {within_s} s")
        await asyncio.sleep(0.01)
    return time.monotonic() - t0


def sse_data(text: str) -> list[str]:
    return [ln[len("data: ") :] for ln in text.splitlines() if ln.startswith("data: ")]


def is_openai_error(obj: Any) -> bool:
    err = obj.get("error") if isinstance(obj, dict) else None
    return isinstance(err, dict) and {"message", "type", "param", "code"} <= set(err)


@dataclass
class Outcome:
    """What one request's client saw."""

    status: int
    ok: bool  # a full answer: JSON completion, or a stream with tokens that ended with [DONE]
    content_type: str
    seconds: float
    ids: set[str] = field(default_factory=set)  # completion ids seen (a stream restarted elsewhere: 2)
    error_event: bool = False  # a stream that ended with an OpenAI error event and [DONE]
    pod: str = ""


async def one(client: httpx.AsyncClient, tag: str, *, stream: bool, max_tokens: int = 4) -> Outcome:
    t0 = time.monotonic()
    body = chat(tag, max_tokens=max_tokens, stream=stream)
    r = await client.post("/v1/chat/completions", json=body)
    dt = time.monotonic() - t0
    ctype = r.headers.get("content-type", "")
    out = Outcome(r.status_code, False, ctype, dt, pod=r.headers.get("x-fleetgate-pod", ""))
    if stream and ctype.startswith("text/event-stream"):
        events = sse_data(r.text)
        objs = [json.loads(e) for e in events if e != "[DONE]"]
        out.ids = {o["id"] for o in objs if "id" in o}
        out.error_event = any(is_openai_error(o) for o in objs)
        tokens = any(c.get("delta", {}).get("content") for o in objs for c in o.get("choices", []))
        out.ok = r.status_code == 200 and tokens and events[-1:] == ["[DONE]"] and not out.error_event
    elif ctype.startswith("application/json"):
        obj = r.json()
        if r.status_code == 200:
            out.ids = {obj["id"]}
            out.ok = bool(obj["choices"][0]["message"]["content"])
        else:
            assert is_openai_error(obj), obj
    return out


async def load(
    client: httpx.AsyncClient, n: int, *, stream: bool, concurrency: int = 8, prefix: str = "r"
) -> list[Outcome]:
    """`n` requests, at most `concurrency` at once."""
    sem = asyncio.Semaphore(concurrency)

    async def go(i: int) -> Outcome:
        async with sem:
            return await one(client, f"{prefix}{i}", stream=stream)

    return list(await asyncio.gather(*(go(i) for i in range(n))))


def success_share(outs: list[Outcome]) -> float:
    return sum(o.ok for o in outs) / len(outs)
