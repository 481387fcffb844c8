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


def test_the_total_bound_evicts_the_least_recently_used_blocks_of_any_pod() -> None:
    idx = PrefixIndex(max_blocks_per_pod=100, max_total_blocks=120)
    for i in range(6):
        idx.add(f"p{i}", _h(f"{i}" * BLOCK * 60))
        assert idx.total_blocks() <= 120
    # the two most recent pods keep everything, the oldest gave their blocks back first
    assert [idx.blocks_of(f"p{i}") for i in range(6)] == [0, 0, 0, 0, 60, 60]
    idx.add("p0", _h("0" * BLOCK * 60))  # p0 serves again: now p4 is the least recently used
    assert [idx.blocks_of(f"p{i}") for i in (0, 4, 5)] == [60, 0, 60]
    assert idx.match(_h("5" * BLOCK * 60)) == {"p5": 60}


def test_eviction_takes_a_prompts_tail_first_so_its_head_still_matches() -> None:
    idx = PrefixIndex(max_blocks_per_pod=1000, max_total_blocks=10)
    doc = _h("D" * BLOCK * 8)
    idx.add("a", doc)
    idx.add("b", _h("E" * BLOCK * 4))  # 12 blocks > 10: two of a's go, the last two
    assert idx.match(doc) == {"a": 6}


def test_a_quiet_pod_keeps_its_blocks_while_the_budget_has_room() -> None:
    idx = PrefixIndex(max_blocks_per_pod=100, max_total_blocks=1000)
    idx.add("quiet", _h("q" * BLOCK * 10))
    for i in range(50):
        idx.add(f"busy{i % 5}", _h(f"{i:03d}" * BLOCK))
    assert idx.blocks_of("quiet") == 10


def test_many_holders_match_like_few() -> None:
    idx = PrefixIndex(max_blocks_per_pod=1000)
    doc = "M" * BLOCK * 6
    for i in range(12):  # past the tuple size: a set of holders
        idx.add(f"p{i}", _h(doc[: BLOCK * (1 + i % 6)]))
    m = idx.match(_h(doc))
    assert m == {f"p{i}": 1 + i % 6 for i in range(12)}
    assert list(m.values()) == sorted(m.values())  # the longest last
    for i in range(12):
        idx.remove_pod(f"p{i}")
    assert idx.match(_h(doc)) == {} and idx.total_blocks() == 0


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


def test_the_byte_budget_holds_under_churn() -> None:
    """Measured, not assumed: everything the index keeps alive stays within `maxBytes` (plus a
    per-pod overhead of ~1-2 KB, noise at real budgets: 20 pods here)."""
    import gc
    import random
    import tracemalloc

    rng = random.Random(3)
    systems = [f"system prompt {k} " * 60 for k in range(4)]
    budget = 3 * 1024 * 1024
    gc.collect()
    tracemalloc.start()
    try:
        base = tracemalloc.get_traced_memory()[0]
        idx = PrefixIndex.for_bytes(budget, max_blocks_per_pod=50_000)
        for i in range(3500):  # ~2.5 x the budget's blocks: full and evicting
            prompt = (rng.choice(systems) if i % 3 else "") + f"user {i} " * rng.randint(10, 60)
            idx.add(f"pod-{rng.randrange(20)}", _h(prompt))
        gc.collect()
        used = tracemalloc.get_traced_memory()[0] - base
    finally:
        tracemalloc.stop()
    assert idx.total_blocks() == idx.max_total_blocks  # the budget, not the per-pod bound, binds
    assert used <= budget + 20 * 2048
