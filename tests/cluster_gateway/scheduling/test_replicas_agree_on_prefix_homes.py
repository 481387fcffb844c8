"""Several gateway replicas, each with its own prefix index, send a new shared prefix to the same pod."""

from __future__ import annotations

import os
import subprocess
import sys
from collections import Counter

from cluster_gateway.pool import EndpointPool
from cluster_gateway.scheduling import Scheduler
from cluster_gateway.scheduling.prefix_home import HashRing, prefix_key

from .podfactory import add_pod, dispatch, req, scheduler

DOC = "<|system|>Quarterly report, section 4: revenue by region and product line. " * 30
NAMES = [f"pod-{i}" for i in range(8)]


def _replica(seed: int) -> tuple[EndpointPool, Scheduler]:
    pool = EndpointPool()
    for name in NAMES:
        add_pod(pool, name, running=5)
    return pool, scheduler(pool, seed=seed)


def test_replicas_send_a_cold_prefix_to_the_same_pod() -> None:
    picks = set()
    for seed in range(5):  # five replicas: different random tie-breaks, separate indexes
        pool, s = _replica(seed)
        picks.add(dispatch(pool, s, req(DOC + f"user: question from replica {seed}")))
    assert len(picks) == 1


def test_different_prefixes_have_different_homes() -> None:
    homes: Counter[str] = Counter()
    for k in range(200):
        key = prefix_key(f"<|system|>tenant {k} policy. " + "x" * 2000, 64, 16)
        assert key is not None
        homes[HashRing(NAMES).homes(key, 1)[0]] += 1
    assert len(homes) == 8
    assert max(homes.values()) < 200 * 0.25  # roughly even over 8 pods


def test_a_busy_home_does_not_keep_its_prefixes() -> None:
    pool, s = _replica(0)
    first = dispatch(pool, s, req(DOC + "q0"))
    picks = Counter(dispatch(pool, s, req(DOC + f"q{n}")) for n in range(1, 24))
    assert picks[first] < 12
    assert len(picks) >= 3


def test_adapter_requests_ignore_prefix_homes() -> None:
    pool = EndpointPool()
    for name in NAMES:
        add_pod(pool, name, models=("llama-8b", "sql-lora"), max_lora=2, running_adapters={"chat-lora"})
    s = scheduler(pool)
    add_pod(pool, "resident", models=("llama-8b", "sql-lora"), max_lora=2, running_adapters={"sql-lora"})
    res = s.schedule(req(DOC + "q", model="sql-lora"))
    assert res.scores["prefix_home"] == 0.0
    assert res.pod.name == "resident"


def test_ring_moves_only_the_prefixes_of_a_departed_pod() -> None:
    keys = [k * 2654435761 % 2**32 for k in range(500)]
    before = HashRing(NAMES)
    after = HashRing(NAMES[:-1])
    moved = [k for k in keys if before.homes(k, 1) != after.homes(k, 1)]
    assert all(before.homes(k, 1) == [NAMES[-1]] for k in moved)
    assert HashRing(reversed(NAMES)).homes(keys[0], 2) == before.homes(keys[0], 2)


def test_homes_do_not_depend_on_the_process_hash_seed() -> None:
    code = (
        "from cluster_gateway.scheduling.prefix_home import HashRing, prefix_key;"
        f"print(HashRing({NAMES!r}).homes(prefix_key({DOC!r}, 64, 16), 2))"
    )
    outs = {
        subprocess.run(
            [sys.executable, "-c", code],
            env={**os.environ, "PYTHONHASHSEED": seed},
            capture_output=True,
            text=True,
            check=True,
            timeout=60,
        ).stdout
        for seed in ("1", "2")
    }
    assert len(outs) == 1


def test_homes_follow_membership_changes() -> None:
    pool = EndpointPool()
    for name in NAMES[:2]:
        add_pod(pool, name)
    s = scheduler(pool)
    prompts = [f"<|system|>tenant {k} rules. " + "y" * 1200 for k in range(40)]
    assert {s.schedule(req(p)).pod.name for p in prompts} == set(NAMES[:2])
    for name in NAMES[2:]:
        add_pod(pool, name)
    after = {s.schedule(req(p)).pod.name for p in prompts}
    assert len(after - set(NAMES[:2])) >= 4  # new pods became homes for some prefixes
    pool.remove(NAMES[0])
    assert NAMES[0] not in {s.schedule(req(p)).pod.name for p in prompts}
