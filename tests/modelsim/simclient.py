"""Test helpers: stream a request and time its chunks; parse a metrics body."""

from __future__ import annotations

import time
from dataclasses import dataclass, field

import httpx

from tests.modelsim.conftest import MODEL


@dataclass
class Timed:
    start: float
    chunk_times: list[float] = field(default_factory=list)
    text: str = ""
    usage: dict[str, object] | None = None

    @property
    def ttft(self) -> float:
        return self.chunk_times[0] - self.start

    @property
    def total(self) -> float:
        return self.chunk_times[-1] - self.start


async def stream_completion(
    client: httpx.AsyncClient, prompt: str, max_tokens: int, model: str = MODEL
) -> Timed:
    """POST a streaming completion and record when each content chunk arrived."""
    import json

    t = Timed(start=time.monotonic())
    body = {
        "model": model,
        "prompt": prompt,
        "max_tokens": max_tokens,
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    async with client.stream("POST", "/v1/completions", json=body) as r:
        assert r.status_code == 200, await r.aread()
        async for line in r.aiter_lines():
            if not line.startswith("data: ") or line == "data: [DONE]":
                continue
            obj = json.loads(line[6:])
            if obj.get("usage"):
                t.usage = obj["usage"]
            for ch in obj["choices"]:
                t.chunk_times.append(time.monotonic())
                t.text += ch["text"]
    return t


def metric(body: str, name: str, **labels: str) -> float:
    """Value of the first sample `name{...}` whose labels include `labels`."""
    for line in body.splitlines():
        if line.startswith("#") or not line.startswith(name):
            continue
        head, _, value = line.rpartition(" ")
        metric_name = head.split("{", 1)[0]
        if metric_name != name:
            continue
        if all(f'{k}="{v}"' in head for k, v in labels.items()):
            return float(value)
    raise KeyError(name)


def label_value(body: str, name: str, label: str) -> str:
    for line in body.splitlines():
        if line.startswith(name + "{"):
            key = f'{label}="'
            i = line.index(key) + len(key)
            return line[i : line.index('"', i)]
    raise KeyError(name)


def distinct_prompt(i: int, tokens: int) -> str:
    """A prompt of `tokens` tokens whose first block differs from every other i (no prefix sharing)."""
    head = f"request number {i:06d} "
    return (head * (4 * tokens // len(head) + 1))[: 4 * tokens]
