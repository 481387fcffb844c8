"""The `kv_fit` filter keeps a long prompt off a pod whose KV pool it would overflow, counting what the
gateway already committed there (the scraped gauge lags a prefill in progress), releases that on
completion, and fails open when the prompt fits nowhere."""

from __future__ import annotations

from cluster_gateway.pool import EndpointPool
from cluster_gateway.scheduling.kv_fit import KVFitFilter
from common.config.gateway import Profile, Scheduling

from .podfactory import add_pod, get, req, scheduler

DOC = "the contract says " * 8000  # ~144k chars, ~36k tokens: two overflow a 64k pool
BLOCKS = 4096  # x 16 = a 64k-token pool


def _cfg() -> Scheduling:
    return Scheduling(
        default_profile="fit",
        profiles={"fit": Profile(weights={"inflight": 1.0}, filters=["model", "healthy", "kv_fit"])},
    )


def _pool(kv: tuple[float, float]) -> EndpointPool:
    pool = EndpointPool()
    for name, usage in zip(("a", "b"), kv, strict=True):
        add_pod(pool, name, kv=usage, num_gpu_blocks=BLOCKS, block_size=16)
    return pool


def test_a_pod_whose_gauge_shows_no_room_is_skipped() -> None:
    pool = _pool((0.9, 0.2))
    s = scheduler(pool, _cfg())
    assert s.schedule(req(DOC + "one", max_tokens=200)).pod.name == "b"


def test_what_the_gateway_committed_counts_before_the_gauge_shows_it_and_is_released() -> None:
    pool = _pool((0.0, 0.0))
    s = scheduler(pool, _cfg())
    fit = s.plugin("kv_fit")
    assert isinstance(fit, KVFitFilter)
    first = req(DOC + "first", max_tokens=200)
    res = s.schedule(first)
    pool.acquire(res.pod.name)
    s.on_dispatch(first, res.pod)
    a = res.pod.name
    assert fit.committed(a) > 36_000
    second = req(DOC.replace("contract", "invoice") + "second", max_tokens=200)  # no shared prefix
    other = "b" if a == "a" else "a"
    get(pool, other).inflight = 20  # in-flight counts alone would now send the second document to `a`
    assert s.schedule(second).pod.name == other  # but two documents would overflow 64k on one pod
    s.on_complete(first, get(pool, a), "ok")
    assert fit.committed(a) == 0


def test_it_fails_open_when_the_prompt_fits_nowhere() -> None:
    pool = _pool((0.9, 0.95))
    s = scheduler(pool, _cfg())
    res = s.schedule(req(DOC + "x", max_tokens=200))
    assert res.pod.name in {"a", "b"}
