"""Bounded client load for the scenarios: closed-loop workers that record every request's outcome.

Shared by the netns tests (`tests/multicluster/`) and the kind runner (`kind.py`): the same load and
the same loss check, whatever the fleet runs on."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Callable
from dataclasses import dataclass

import httpx

from fleetgate.netbed.topology import MODEL


@dataclass
class Request:
    """One client request's outcome, for the scenarios' bookkeeping."""

    started: float
    finished: float
    status: int  # 0: no HTTP answer at all
    cluster: str
    error: str = ""
    stream_error: bool = False  # a stream that ended in an SSE error event


def chat(max_tokens: int = 8, stream: bool = False) -> dict[str, object]:
    body: dict[str, object] = {
        "model": MODEL,
        "messages": [{"role": "user", "content": "how far away are you?"}],
        "max_tokens": max_tokens,
        "stream": stream,
    }
    if stream:
        body["stream_options"] = {"include_usage": True}
    return body


async def one(
    client: httpx.AsyncClient, headers: dict[str, str], *, max_tokens: int = 8, stream: bool = False
) -> Request:
    """Send one chat completion; a stream is read to its end and checked for an SSE error event."""
    t0 = time.monotonic()
    try:
        if not stream:
            r = await client.post("/v1/chat/completions", json=chat(max_tokens), headers=headers)
            err = "" if r.status_code == 200 else r.text[:300]
            return Request(t0, time.monotonic(), r.status_code, r.headers.get("x-fleetgate-cluster", ""), err)
        async with client.stream(
            "POST", "/v1/chat/completions", json=chat(max_tokens, True), headers=headers
        ) as r:
            broke = done = False
            if r.status_code != 200:
                body = (await r.aread()).decode(errors="replace")[:300]
                return Request(
                    t0, time.monotonic(), r.status_code, r.headers.get("x-fleetgate-cluster", ""), body
                )
            async for line in r.aiter_lines():
                if line == "data: [DONE]":
                    done = True
                elif line.startswith("data: ") and '"error"' in line:
                    broke = "error" in json.loads(line[6:])
            status = r.status_code if (done or broke) else 0
            err = "" if done or broke else "stream ended without [DONE] or an error event"
            return Request(
                t0,
                time.monotonic(),
                status,
                r.headers.get("x-fleetgate-cluster", ""),
                err,
                stream_error=broke,
            )
    except httpx.HTTPError as exc:
        return Request(t0, time.monotonic(), 0, "", f"{type(exc).__name__}: {exc}")


async def run_load(
    client: httpx.AsyncClient,
    headers: Callable[[int], dict[str, str]],
    *,
    workers: int,
    until: asyncio.Event,
    max_requests: int,
    stream_every: int = 0,
) -> list[Request]:
    """Closed-loop workers (worker i sends `headers(i)`) until `until` is set or `max_requests` were sent;
    every `stream_every`-th request of a worker streams."""
    out: list[Request] = []

    async def worker(i: int) -> None:
        n = 0
        while not until.is_set() and len(out) < max_requests:
            n += 1
            stream = bool(stream_every) and n % stream_every == 0
            out.append(await one(client, headers(i), stream=stream, max_tokens=16 if stream else 8))

    await asyncio.gather(*(worker(i) for i in range(workers)))
    return out


async def wait_for(cond: Callable[[], bool], within_s: float, what: str) -> None:
    deadline = time.monotonic() + within_s
    while not cond():
        if time.monotonic() > deadline:
            # not an AssertionError: an xfail(raises=AssertionError) must not swallow a stuck bed
            raise TimeoutError(f"timed out after {within_s:.0f} s waiting for {what}")
        await asyncio.sleep(0.1)


def failures(reqs: list[Request]) -> list[str]:
    return [f"{r.status} {r.cluster} {r.error}".strip() for r in reqs if r.status != 200 or r.stream_error]
