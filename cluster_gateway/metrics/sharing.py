"""One scrape per pod across gateway replicas: the pods are sharded over a ring, samples are pulled.

Every replica keeps its whole pool fresh, but scrapes only its shard: the pods whose CRC-32 point
falls to it on a consistent-hash ring (`common.hashring`, the ring prefix homes use) over the
replicas that currently answer. Every `pullIntervalMs` it pulls from each peer the samples that peer
took since the last pull (gateway-to-gateway HTTP, msgpack, one keep-alive connection per peer,
`Authorization: Bearer` with a token shared by the replicas, compared by SHA-256 digest). No
Redis: the cluster gateway's deployment has none of its own (Tier 2's may be in another region),
and one hop between replicas is both the cheapest and the one whose failure is local.

Freshness: a replica's own shard is as fresh as the scrape interval; another shard's samples arrive
within interval + pull interval + one loopback/LAN round trip (each carries its age, so no clock is
shared). With each pull a replica also names the peer's pods it sent requests to since their last
sample, so the owner keeps those at the fast interval and counts them for frozen-metrics detection.

Fail-safe (static stability): a pod not in this replica's shard is still scraped here whenever its
newest sample is older than 2 x interval + pull interval, so a dead peer's pods are scraped at once
by the others, before the ring even changes, and a replica whose sharing is broken (peers
unreachable, token wrong) soon scrapes everything itself. A peer silent for `peerTimeoutMs` leaves
the ring, which hands its shard over for good; when it answers again it rejoins.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import hmac
import logging
import os
import socket
import time
from functools import partial
from typing import cast

import msgspec

from cluster_gateway.discovery import build_discovery
from cluster_gateway.metrics.http_get import HttpGetError, PodConnection
from cluster_gateway.metrics.scraper import Scraper
from cluster_gateway.pool import EndpointPool, PodMetrics
from common.config.gateway import ScrapeSharing
from common.config.loader import ConfigError
from common.errors import error_body
from common.hashring import HashRing, point

__all__ = ["PullAnswer", "PullRequest", "ScrapeShare", "Share", "load_peer_token"]

log = logging.getLogger(__name__)

PATH = "/fleetgate/v1/samples"
_MAX_BODY = 16 * 1024 * 1024
_HEAD_LIMIT = 16 * 1024


class Share(msgspec.Struct, array_like=True):
    """One pod's sample as its scraper took it; `age_s` at the moment it was served."""

    name: str
    age_s: float
    stale: bool
    metrics: PodMetrics


class PullRequest(msgspec.Struct, array_like=True):
    replica: str  # the puller's id
    since: int  # the highest sequence number it has from this peer (0: everything)
    busy: list[str] = []  # the peer's pods the puller sent requests to since their last sample


class PullAnswer(msgspec.Struct, array_like=True):
    replica: str
    seq: int  # the highest sequence number in this answer's store
    samples: list[Share]


_encode = msgspec.msgpack.Encoder().encode
_decode_request = msgspec.msgpack.Decoder(PullRequest).decode
_decode_answer = msgspec.msgpack.Decoder(PullAnswer).decode


def load_peer_token(cfg: ScrapeSharing) -> str:
    """The replicas' shared token (file first, then environment); ConfigError when there is none."""
    if cfg.token_file:
        try:
            with open(cfg.token_file, encoding="utf-8") as f:
                token = f.read().strip()
        except OSError as exc:
            raise ConfigError(f"scrape.sharing.tokenFile: cannot read {cfg.token_file}: {exc}") from None
    else:
        token = os.environ.get(cfg.token_env, "").strip()
    if len(token) < 16:
        raise ConfigError(
            f"scrape.sharing: a shared token of at least 16 characters is required "
            f"(tokenFile, or ${cfg.token_env})"
        )
    return token


def _replica_id(cfg: ScrapeSharing) -> str:
    return cfg.replica_id or os.environ.get("POD_NAME") or f"{socket.gethostname()}:{cfg.port}"


class _Served:
    """This replica's samples, numbered, for peers to pull."""

    def __init__(self) -> None:
        self.seq = 0
        self.samples: dict[str, tuple[int, float, bool, PodMetrics]] = {}

    def add(self, name: str, metrics: PodMetrics, stale: bool) -> None:
        self.seq += 1
        self.samples[name] = (self.seq, metrics.scraped_at, stale, metrics)

    def since(self, seq: int, now: float) -> list[Share]:
        return [
            Share(name, now - at, stale, m) for name, (s, at, stale, m) in self.samples.items() if s > seq
        ]

    def forget(self, names: set[str]) -> None:
        for name in [n for n in self.samples if n not in names]:
            del self.samples[name]


class _PeerProtocol(asyncio.Protocol):
    """The sharing endpoint: `POST /fleetgate/v1/samples` (msgpack), one request at a time."""

    def __init__(self, share: ScrapeShare) -> None:
        self._share = share
        self._buf = bytearray()
        self._transport: asyncio.Transport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self._transport = cast(asyncio.Transport, transport)
        self._share.connections.add(self._transport)

    def connection_lost(self, exc: Exception | None) -> None:
        if self._transport is not None:
            self._share.connections.discard(self._transport)
        self._transport = None

    def data_received(self, data: bytes) -> None:
        self._buf += data
        while self._transport is not None:
            end = self._buf.find(b"\r\n\r\n")
            if end < 0:
                if len(self._buf) > _HEAD_LIMIT:
                    self._reply(431, b"request header too large", close=True)
                return
            lines = bytes(self._buf[:end]).decode("latin-1").split("\r\n")
            headers = {}
            for line in lines[1:]:
                key, _, value = line.partition(":")
                headers[key.strip().lower()] = value.strip()
            try:
                length = int(headers.get("content-length", "0"))
            except ValueError:
                self._reply(400, b"bad content-length", close=True)
                return
            if length > _MAX_BODY:
                self._reply(413, b"request body too large", close=True)
                return
            if len(self._buf) < end + 4 + length:
                return
            body = bytes(self._buf[end + 4 : end + 4 + length])
            del self._buf[: end + 4 + length]
            self._handle(lines[0], headers.get("authorization", ""), body)

    def _handle(self, request_line: str, auth: str, body: bytes) -> None:
        parts = request_line.split(" ")
        if len(parts) != 3 or parts[0] != "POST" or parts[1] != PATH:
            self._reply(404, b"not found")
            return
        if not self._share.authorized(auth):
            self._reply(401, b"invalid or missing peer token")
            return
        try:
            request = _decode_request(body)
        except msgspec.DecodeError as exc:
            self._reply(400, f"bad pull request: {exc}".encode())
            return
        self._reply(200, self._share.answer(request), json=False)

    def _reply(self, status: int, body: bytes, *, json: bool = True, close: bool = False) -> None:
        assert self._transport is not None
        if json:
            kind = "authentication_error" if status == 401 else "invalid_request_error"
            body = msgspec.json.encode(error_body(body.decode(), type=kind, code=f"peer_{status}"))
            ctype = b"application/json"
        else:
            ctype = b"application/msgpack"
        head = b"HTTP/1.1 %d X\r\ncontent-type: %s\r\ncontent-length: %d\r\n" % (status, ctype, len(body))
        self._transport.write(head + (b"connection: close\r\n\r\n" if close else b"\r\n") + body)
        if close:
            self._share.connections.discard(self._transport)
            self._transport.close()
            self._transport = None


class _Peer:
    def __init__(self, address: str, port: int) -> None:
        self.conn = PodConnection(address, port)
        self.replica: str | None = None  # learned from its answers
        self.since = 0
        self.ok_at = -float("inf")


class ScrapeShare:
    """Shards `scraper`'s pods over the live replicas and exchanges samples with them."""

    def __init__(
        self, cfg: ScrapeSharing, pool: EndpointPool, scraper: Scraper, host: str, token: str
    ) -> None:
        self.cfg = cfg
        self.pool = pool
        self.scraper = scraper
        self.host = cfg.host or host
        self.replica = _replica_id(cfg)
        self._digest = hashlib.sha256(token.encode()).digest()
        self._auth = b"Authorization: Bearer " + token.encode() + b"\r\n"
        self._pull_s = cfg.pull_interval_ms / 1000
        self._timeout_s = cfg.peer_timeout_ms / 1000
        interval_s = scraper.cadence.interval_s
        self.takeover_s = 2 * interval_s + self._pull_s
        self._served = _Served()
        self._peer_pool = EndpointPool()
        self._discovery = build_discovery(cfg.peers)
        self._peers: dict[str, _Peer] = {}  # peer endpoint name → its state
        self._members: tuple[str, ...] = (self.replica,)
        self._ring = HashRing(self._members)
        self._owners: dict[str, str] = {}  # pod → owning replica (for this ring)
        self._busy: dict[str, int] = {}  # own pods peers sent requests to since our last sample
        self.bound_port = 0
        self._server: asyncio.Server | None = None
        self._sock: socket.socket | None = None
        self.connections: set[asyncio.Transport] = set()  # peers' open connections to us
        self.pulled = 0  # samples applied from peers (for tests and the bench)
        scraper.skip = self._skip
        scraper.on_sample = self._on_sample
        scraper.extra_dispatched = self._busy.get

    # --- the ring ------------------------------------------------------------------------------
    @property
    def members(self) -> tuple[str, ...]:
        return self._members

    def owner(self, name: str) -> str:
        owner = self._owners.get(name)
        if owner is None:
            owner = self._owners[name] = self._ring.homes(point(name), 1)[0]
        return owner

    def _update_ring(self, now: float) -> None:
        live = {p.replica for p in self._peers.values() if p.replica and now - p.ok_at <= self._timeout_s}
        live.discard(self.replica)
        members = tuple(sorted(live | {self.replica}))
        if members != self._members:
            log.info("scrape shard ring now %s", ", ".join(members), extra={"replica": self.replica})
            self._members = members
            self._ring = HashRing(members)
            self._owners.clear()

    def _skip(self, name: str) -> bool:
        """Another replica keeps this pod fresh: its shard, and its sample is recent enough."""
        if self.owner(name) == self.replica:
            return False
        pod = self.pool.get(name)
        return pod is not None and pod.metrics is not None and pod.metrics_age() <= self.takeover_s

    # --- serving -------------------------------------------------------------------------------
    def _on_sample(self, name: str, metrics: PodMetrics) -> None:
        self._busy.pop(name, None)
        pod = self.pool.get(name)
        self._served.add(name, metrics, pod.stale if pod is not None else False)

    def authorized(self, header: str) -> bool:
        scheme, _, token = header.partition(" ")
        presented = hashlib.sha256(token.strip().encode()).digest()
        return scheme.lower() == "bearer" and hmac.compare_digest(presented, self._digest)

    def answer(self, request: PullRequest) -> bytes:
        for name in request.busy:
            if self.pool.get(name) is not None:
                self._busy[name] = self._busy.get(name, 0) + 1
        since = request.since if request.since <= self._served.seq else 0  # we restarted
        return _encode(
            PullAnswer(self.replica, self._served.seq, self._served.since(since, time.monotonic()))
        )

    # --- pulling -------------------------------------------------------------------------------
    async def _pull(self, peer: _Peer) -> None:
        busy = [
            p.name
            for p in self.pool.pods()
            if p.dispatched_since_scrape > 0
            and peer.replica is not None
            and self.owner(p.name) == peer.replica
        ]
        body = _encode(PullRequest(self.replica, peer.since, busy))
        started = time.monotonic()
        async with asyncio.timeout(min(self._timeout_s, max(4 * self._pull_s, 0.2))):
            status, raw = await peer.conn.post(PATH, body, _MAX_BODY, self._auth)
        if status != 200:
            raise HttpGetError(f"peer answered HTTP {status}")
        answer = _decode_answer(raw)
        now = time.monotonic()
        peer.replica, peer.ok_at = answer.replica, now
        if answer.replica == self.replica:
            return  # our own endpoint (a Kubernetes selector matches this pod too)
        peer.since = answer.seq if answer.seq >= peer.since else 0
        half_trip = (now - started) / 2
        for share in answer.samples:
            self._apply(share, now - share.age_s - half_trip)

    def _apply(self, share: Share, scraped_at: float) -> None:
        pod = self.pool.get(share.name)
        if pod is None or (pod.metrics is not None and pod.metrics.scraped_at >= scraped_at):
            return  # not (yet) in our pool, or ours is fresher
        metrics = share.metrics
        metrics.scraped_at = scraped_at
        self.pool.record_scrape(share.name, metrics)
        pod.stale = share.stale
        self.pulled += 1

    async def _pull_loop(self) -> None:
        while True:
            started = time.monotonic()
            endpoints = {p.name: p.endpoint for p in self._peer_pool.pods()}
            for name in [n for n in self._peers if n not in endpoints]:
                self._peers.pop(name).conn.close()
            for name, ep in endpoints.items():
                peer = self._peers.get(name)
                if peer is None or (peer.conn.host, peer.conn.port) != (ep.address, ep.port):
                    if peer is not None:
                        peer.conn.close()
                    self._peers[name] = _Peer(ep.address, ep.port)
            results = await asyncio.gather(
                *(self._pull(p) for p in self._peers.values()), return_exceptions=True
            )
            for (name, _), result in zip(self._peers.items(), results, strict=True):
                if isinstance(result, BaseException) and not isinstance(result, asyncio.CancelledError):
                    log.debug("pull from peer %s failed: %s", name, result)
            now = time.monotonic()
            self._update_ring(now)
            self._served.forget({p.name for p in self.pool.pods()})
            await asyncio.sleep(max(0.0, self._pull_s - (time.monotonic() - started)))

    # --- lifecycle -----------------------------------------------------------------------------
    def listen_on(self, sock: socket.socket) -> None:
        """Serve on this already bound socket instead of `host:port` (tests bind port 0)."""
        self._sock = sock

    async def start(self) -> None:
        loop = asyncio.get_running_loop()
        factory = partial(_PeerProtocol, self)
        if self._sock is not None:
            self._server = await loop.create_server(factory, sock=self._sock)
        else:
            self._server = await loop.create_server(factory, self.host, self.cfg.port)
        self.bound_port = int(self._server.sockets[0].getsockname()[1])
        log.info("scrape sharing on %s:%d as replica %s", self.host, self.bound_port, self.replica)

    async def run(self) -> None:
        """Serve, discover peers and pull until cancelled."""
        if self._server is None:
            await self.start()
        discovery = asyncio.create_task(self._discovery.run(self._peer_pool))
        try:
            await self._pull_loop()
        finally:
            discovery.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await discovery
            for peer in self._peers.values():
                peer.conn.close()
            if self._server is not None:
                self._server.close()  # stops listening; open keep-alive connections go too:
                self._server = None
            for transport in list(self.connections):
                transport.close()
            self.connections.clear()
