"""Frozen metrics: a pod whose `/metrics` stops changing while it is being sent requests.

A scrape that succeeds is not necessarily fresh: an exporter stuck on a cached body, a sidecar
replaying its last answer, or an engine whose metrics thread is wedged all answer 200 with the same
bytes, so the pod keeps its last (usually idle-looking) queue and KV figures and attracts traffic.
A model server that is handed requests cannot have a byte-identical body scrape after scrape:
every request moves a gauge (waiting/running) or a counter (queries, successes, token counts).

So: when `frozen_after_scrapes` scrapes in a row return the same body *and* the gateway dispatched
requests to the pod in each of those intervals, the pod's metrics are stale. Identical bodies
without dispatches (an idle pod) neither count nor reset the streak. The first changed body ends it.
The comparison is a length check and a memcmp against the previous body (one per pod kept), so
it costs nothing measurable next to the parse.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(slots=True)
class _Seen:
    body: bytes
    streak: int = 0  # identical scrapes in a row, each after requests were dispatched


class FrozenBodies:
    """Per-pod streak of identical `/metrics` bodies under traffic."""

    def __init__(self, after_scrapes: int) -> None:
        self.after_scrapes = after_scrapes  # 0: never frozen
        self._seen: dict[str, _Seen] = {}

    def observe(self, name: str, body: bytes, dispatched: int) -> bool:
        """Record one good scrape of pod `name`; True when its metrics count as frozen.

        `dispatched`: requests the gateway sent the pod since its previous good scrape."""
        if self.after_scrapes <= 0:
            return False
        seen = self._seen.get(name)
        if seen is None or seen.body != body:
            self._seen[name] = _Seen(body)
            return False
        if dispatched > 0:
            seen.streak += 1
        return seen.streak >= self.after_scrapes

    def streak(self, name: str) -> int:
        seen = self._seen.get(name)
        return 0 if seen is None else seen.streak

    def forget(self, name: str) -> None:
        self._seen.pop(name, None)
