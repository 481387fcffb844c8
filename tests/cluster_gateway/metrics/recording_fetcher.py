"""A spy around the scraper's own fetcher: what it asked for, and how many fetches ran at once."""

from __future__ import annotations

from cluster_gateway.metrics.fetch import Fetcher
from cluster_gateway.pool import Endpoint


class Recording:
    """The scraper's fetcher, recording each /metrics path asked and body size answered, and the
    fetches in progress (`in_flight`, `peak`). A fetch the scraper gives up on (its timeout) stops
    counting before its slot is free for the next, so `peak` is exact, with no race against the pod
    noticing the disconnect."""

    def __init__(self, inner: Fetcher) -> None:
        self.inner = inner
        self.seen: list[tuple[str, int]] = []
        self.in_flight = 0
        self.peak = 0

    async def get(self, endpoint: Endpoint, path: str, channel: str) -> bytes:
        self.in_flight += 1
        self.peak = max(self.peak, self.in_flight)
        try:
            body = await self.inner.get(endpoint, path, channel)
        finally:
            self.in_flight -= 1
        if path.startswith("/metrics"):
            self.seen.append((path, len(body)))
        return body

    def forget(self, name: str) -> None:
        self.inner.forget(name)

    async def aclose(self) -> None:
        await self.inner.aclose()
