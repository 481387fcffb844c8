"""Gateway replicas on 127.0.0.1 split the scrapes of a simulated fleet and share the samples:
each pod is scraped by one replica per interval, every replica sees fresh samples of every pod,
a dead replica's shard is taken over, and a replica cut off from its peers scrapes everything."""

from __future__ import annotations

import asyncio
import socket
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack, asynccontextmanager
from pathlib import Path

from cluster_gateway.gateway import ClusterGateway
from common.config.gateway import GatewaySpec
from common.config.loader import load_config_data
from modelsim.fleet import PodSpec
from modelsim.metrics_ports import MetricsPorts
from tests.eventually import eventually

INTERVAL_S = 0.1
PODS = 12
TOKEN = "peer-token-0123456789abcdef"


def _spec(ports: list[int], replica: str, peers: list[int], token_file: Path) -> GatewaySpec:
    data = {
        "discovery": {"static": {"endpoints": [f"http://127.0.0.1:{p}" for p in ports]}},
        "scrape": {
            "intervalMs": int(INTERVAL_S * 1000),
            "timeoutMs": 500,
            "maxStalenessMs": 2000,
            "idleAfterScrapes": 0,  # every pod at the fast interval: hits per pod are predictable
            "engine": "vllm",
            "sharing": {
                "replicaId": replica,
                "tokenFile": str(token_file),
                "pullIntervalMs": 50,
                "peerTimeoutMs": 600,
                "peers": {"static": {"endpoints": [f"http://127.0.0.1:{p}" for p in peers]}},
            },
        },
    }
    return load_config_data(data, GatewaySpec, source="test")


def _socket() -> socket.socket:
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    return sock


@asynccontextmanager
async def replicas(
    fleet: MetricsPorts, n: int, tmp_path: Path, bad_token_for: int | None = None
) -> AsyncIterator[list[ClusterGateway]]:
    socks = [_socket() for _ in range(n)]
    peer_ports = [s.getsockname()[1] for s in socks]
    good = tmp_path / "token"
    good.write_text(TOKEN)
    bad = tmp_path / "bad-token"
    bad.write_text("not-the-shared-token-at-all")
    gateways = []
    for i, sock in enumerate(socks):
        token = bad if i == bad_token_for else good
        gw = ClusterGateway(_spec([p.port for p in fleet.pods], f"r{i}", peer_ports, token), port=0)
        assert gw.share is not None
        gw.share.listen_on(sock)
        gateways.append(gw)
    async with AsyncExitStack() as stack:
        for gw in gateways:
            await gw.start()
            stack.push_async_callback(gw.stop)
        yield gateways


def _fresh_everywhere(gateways: list[ClusterGateway], limit_s: float) -> bool:
    return all(
        len(gw.pool.pods()) == PODS
        and all(p.metrics is not None and not p.stale and p.metrics_age() <= limit_s for p in gw.pool.pods())
        for gw in gateways
    )


async def _hits_per_interval(fleet: MetricsPorts, seconds: float) -> list[float]:
    before = list(fleet.served)
    await asyncio.sleep(seconds)
    return [(after - b) / (seconds / INTERVAL_S) for after, b in zip(fleet.served, before, strict=True)]


async def test_three_replicas_scrape_each_pod_once_and_all_see_every_pod_fresh(tmp_path: Path) -> None:
    fleet = MetricsPorts(PODS, PodSpec(profile="tiny"))
    await fleet.start()
    try:
        async with replicas(fleet, 3, tmp_path) as gateways:
            shares = [gw.share for gw in gateways]
            await eventually(
                lambda: all(s is not None and s.members == ("r0", "r1", "r2") for s in shares),
                within=10,
                what="every replica sees all three on the ring",
            )
            # own shard: every interval; others' shards: interval + pull + a loopback trip
            limit_s = 2 * INTERVAL_S + 0.05 + 0.15  # (the last term: a busy 2-core machine)
            await eventually(lambda: _fresh_everywhere(gateways, limit_s), within=10, what="all fresh")
            hits = await _hits_per_interval(fleet, 2.0)
            # one replica's scrapes: ~1 per interval per pod (three replicas each scraping: ~3)
            assert all(0.3 <= h <= 1.4 for h in hits), hits
            owners = {name: shares[0].owner(name) for name in (p.name for p in gateways[0].pool.pods())}
            assert all(s is not None and all(s.owner(n) == o for n, o in owners.items()) for s in shares)
            # the pods' names are URLs on ports the kernel picked, so which replica owns which pod
            # is random here: all three own some in ~98% of runs, two at least in every run (the
            # ring's balance over fixed names is tests/common/test_hashring.py's business)
            assert len(set(owners.values())) >= 2
            for _ in range(5):  # fresh samples of all pods in every replica, sampled a few times
                assert _fresh_everywhere(gateways, limit_s)
                await asyncio.sleep(0.1)
            assert all(s is not None and s.pulled > 0 for s in shares)

            # a replica dies: its shard is taken over within the peer timeout (plus a pull)
            await gateways[2].stop()
            took = await eventually(
                lambda: all(s is not None and s.members == ("r0", "r1") for s in shares[:2]),
                within=5,
                what="the dead replica leaves the ring",
            )
            assert took < 0.6 + 1.0  # peerTimeoutMs + pull + scheduling slack
            assert _fresh_everywhere(gateways[:2], limit_s)  # the takeover kept every pod fresh
            hits = await _hits_per_interval(fleet, 1.5)
            assert all(0.3 <= h <= 1.4 for h in hits), hits
    finally:
        await fleet.stop()


async def test_a_replica_cut_off_from_its_peers_scrapes_every_pod_itself(tmp_path: Path) -> None:
    fleet = MetricsPorts(PODS, PodSpec(profile="tiny"))
    await fleet.start()
    try:
        async with replicas(fleet, 2, tmp_path, bad_token_for=1) as gateways:
            alone = gateways[1].share
            assert alone is not None
            await asyncio.sleep(1.0)  # pulls fail with 401 on both sides: nobody joins a ring
            assert alone.members == ("r1",) and gateways[0].share is not None
            assert gateways[0].share.members == ("r0",)
            limit_s = 2 * INTERVAL_S + 0.15
            await eventually(lambda: _fresh_everywhere(gateways, limit_s), within=5, what="all fresh")
            hits = await _hits_per_interval(fleet, 1.5)
            assert all(h >= 1.25 for h in hits), hits  # each replica scrapes everything (static stability)
    finally:
        await fleet.stop()
