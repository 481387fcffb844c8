"""The prefix index finds the longest cached prefix per pod and stays within its memory bound."""

from __future__ import annotations

from cluster_gateway.scheduling import LLMRequest, PrefixIndex, block_hashes

BLOCK = 64


def _h(text: str, max_blocks: int = 256) -> tuple[int, ...]:
    return block_hashes(text, BLOCK, max_blocks)


def test_hashes_cover_full_blocks_only_and_chain() -> None:
    assert _h("a" * 63) == ()
    two = _h("a" * 64 + "b" * 64 + "tail")
    assert len(two) == 2
    # Same second block after a different first block: a different prefix, a different hash.
    assert _h("c" * 64 + "b" * 64)[1] != two[1]
    assert len(_h("x" * 64 * 300, max_blocks=256)) == 256


def test_match_returns_the_longest_prefix_per_pod() -> None:
    idx = PrefixIndex(max_blocks_per_pod=1000)
    system = "S" * BLOCK * 4
    idx.add("short", _h(system[: BLOCK * 2]))
    idx.add("full", _h(system + "U" * BLOCK * 2))
    idx.add("other", _h("Z" * BLOCK * 3))
    assert idx.match(_h(system + "V" * BLOCK * 2)) == {"short": 2, "full": 4}
    assert idx.match(_h("nothing in common" * 20)) == {}
    assert idx.match(()) == {}


def test_lru_bound_per_pod_holds_and_evicts_the_oldest() -> None:
    idx = PrefixIndex(max_blocks_per_pod=10)
    old = _h("o" * BLOCK * 6)
    idx.add("p", old)
    for i in range(20):
        idx.add("p", _h(f"{i:04d}" * (BLOCK // 4) * 3))
        assert idx.blocks_of("p") <= 10
    assert idx.blocks_of("p") == 10
    assert idx.match(old) == {}  # evicted
    assert idx.total_blocks() == 10


def test_touching_a_prefix_keeps_it_cached() -> None:
    idx = PrefixIndex(max_blocks_per_pod=6)
    hot = _h("h" * BLOCK * 2)
    idx.add("p", hot)
    for i in range(10):
        idx.add("p", _h(f"{i:02d}" * (BLOCK // 2) * 2))
        idx.add("p", hot)  # reused by every request, so never the least recently used
    assert idx.match(hot) == {"p": 2}


def test_removed_pods_are_forgotten_everywhere() -> None:
    idx = PrefixIndex(max_blocks_per_pod=100)
    h = _h("s" * BLOCK * 3)
    idx.add("a", h)
    idx.add("b", h)
    idx.remove_pod("a")
    assert idx.match(h) == {"b": 3}
    idx.retain_pods(["c"])
    assert idx.match(h) == {}
    assert idx.total_blocks() == 0


def test_request_hashes_are_computed_once() -> None:
    r = LLMRequest(model="m", prompt_text="q" * 640, max_tokens=None, stream=True, profile=None)
    first = r.block_hashes(BLOCK, 256)
    assert r.block_hashes(BLOCK, 256) is first
    assert len(r.block_hashes(32, 256)) == 20  # a different block size is recomputed


def test_total_bound_shrinks_each_pods_share_as_the_pool_grows() -> None:
    idx = PrefixIndex(max_blocks_per_pod=100, max_total_blocks=120)
    for i in range(6):
        idx.add(f"p{i}", _h(f"{i}" * BLOCK * 60))
        assert idx.total_blocks() <= 120
    assert idx.blocks_of("p0") == 20  # 120 / 6 pods


def test_shared_and_single_holders_match_the_same_way() -> None:
    idx = PrefixIndex(max_blocks_per_pod=1000)
    doc = "D" * BLOCK * 5
    idx.add("a", _h(doc))
    assert idx.match(_h(doc)) == {"a": 5}  # one holder
    idx.add("b", _h(doc[: BLOCK * 3]))
    assert idx.match(_h(doc)) == {"a": 5, "b": 3}  # now shared
    idx.remove_pod("a")
    assert idx.match(_h(doc)) == {"b": 3}  # back to one holder
    idx.remove_pod("b")
    assert idx.match(_h(doc)) == {}
