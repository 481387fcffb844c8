"""When a pod's KV-event view is trusted: in-order streams are, lost batches are replayed or make the
pod untrusted until AllBlocksCleared, and an engine hashing differently is never trusted."""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence

import pytest
import zmq.asyncio

from cluster_gateway.scheduling.precise.index import GAPPED, MISMATCH, PARTIAL, TRUSTED, PodCache
from cluster_gateway.scheduling.precise.subscriber import EventStream
from common.kv_block_hash import BlockHasher
from common.kv_events import AllBlocksCleared, BlockRemoved, BlockStored, Cleared, Removed, Stored
from modelsim.kv_events import KVEventPublisher, KVEventsConfig
from tests.eventually import eventually

HASHER = BlockHasher(16, "0")
TOKENS = list(range(1000, 1048))  # 3 blocks
CHAIN = HASHER.hashes(TOKENS)


def _verify(bs: int, tokens: Sequence[int], lora: str | None, hashes: Sequence[int]) -> bool:
    return bs == 16 and HASHER.hashes(tokens, lora, len(hashes)) == list(hashes)


def _stored(hashes: list[int] = CHAIN, tokens: list[int] = TOKENS) -> Stored:
    return Stored(hashes, None, tokens, 16, None)


def test_an_in_order_stream_from_seq_0_is_trusted() -> None:
    c = PodCache("p", _verify)
    c.apply(0, [_stored()])
    assert c.state == TRUSTED and c.matched(CHAIN) == 3
    c.apply(1, [Removed([CHAIN[1]])])
    assert c.matched(CHAIN) == 1


def test_a_late_join_is_partial_until_the_cache_is_cleared() -> None:
    c = PodCache("p", _verify)
    c.apply(7, [_stored()])
    assert c.state == PARTIAL
    c.apply(8, [Cleared(), _stored()])
    assert c.state == TRUSTED and c.matched(CHAIN) == 3


def test_lost_batches_make_the_pod_untrusted_until_all_blocks_cleared() -> None:
    c = PodCache("p", _verify)
    c.apply(0, [_stored()])
    c.lost(5)
    assert c.state == GAPPED
    c.apply(5, [_stored()])
    assert c.state == GAPPED
    c.apply(6, [Cleared()])
    assert c.state == TRUSTED and c.matched(CHAIN) == 0


def test_an_engine_hashing_differently_is_never_trusted() -> None:
    c = PodCache("p", _verify)
    other = BlockHasher(16, "42").hashes(TOKENS)  # another PYTHONHASHSEED
    c.apply(0, [_stored(other)])
    assert c.state == MISMATCH and not c.blocks
    c.apply(1, [Cleared(), _stored()])
    assert c.state == MISMATCH


@pytest.fixture
async def ctx() -> AsyncIterator[zmq.asyncio.Context]:
    c = zmq.asyncio.Context()
    yield c
    c.term()


def _events() -> list[BlockStored | BlockRemoved | AllBlocksCleared]:
    return [BlockStored(CHAIN, None, TOKENS, 16, None, "GPU")]


async def _wait_connected(pub: KVEventPublisher, cache: PodCache) -> None:
    """PUB/SUB joins take a moment: publish a clearing batch until the subscriber has seen one."""
    seen = cache.batches

    def got() -> bool:
        if cache.batches > seen:
            return True
        pub.publish([AllBlocksCleared()])
        return False

    await eventually(got, within=5, what="subscriber connected", interval=0.05)


async def test_a_lost_batch_is_replayed_and_the_pod_stays_trusted(ctx: zmq.asyncio.Context) -> None:
    pub = KVEventPublisher(KVEventsConfig(endpoint="tcp://127.0.0.1:*", replay_endpoint="tcp://127.0.0.1:*"))
    pub.start()
    cache = PodCache("p", _verify)
    stream = EventStream(ctx, cache, pub.endpoint, pub.replay_endpoint)
    stream.start()
    try:
        await _wait_connected(pub, cache)
        assert cache.complete  # replay supplied everything from seq 0
        pub.publish(_events())
        await eventually(lambda: cache.state == TRUSTED, what="trusted")  # hashing verified
        pub.drop_next_for_test = True
        pub.publish(_events())  # buffered for replay, never sent: a lost message
        pub.publish([BlockRemoved([CHAIN[2]], "GPU")])
        await eventually(lambda: cache.next_seq == pub.next_seq, what="gap replayed")
        assert cache.state == TRUSTED and cache.gaps == 0
        assert cache.matched(CHAIN) == 2  # the replayed BlockStored, then the live BlockRemoved
    finally:
        await stream.close()
        await pub.close()


async def test_without_replay_a_lost_batch_leaves_the_pod_gapped(ctx: zmq.asyncio.Context) -> None:
    pub = KVEventPublisher(KVEventsConfig(endpoint="tcp://127.0.0.1:*"))
    cache = PodCache("p", _verify)
    stream = EventStream(ctx, cache, pub.endpoint, None)
    stream.start()
    try:
        await _wait_connected(pub, cache)
        pub.publish(_events())
        await eventually(lambda: cache.state == TRUSTED, what="trusted")  # verified from its first chain
        pub.drop_next_for_test = True
        pub.publish([BlockRemoved([CHAIN[0]], "GPU")])  # lost: the gateway would keep a stale block
        pub.publish(_events())
        await eventually(lambda: cache.state == GAPPED, what="gap noticed")
        pub.publish([AllBlocksCleared()])
        await eventually(lambda: cache.state == TRUSTED, what="trusted again after AllBlocksCleared")
    finally:
        await stream.close()
        await pub.close()
