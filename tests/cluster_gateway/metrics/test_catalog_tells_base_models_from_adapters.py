"""The models refresh keeps `/v1/models`' parent field: each pod's catalog says which names are base
models and which are LoRA adapters (and of which base), read from real simulated pods."""

from __future__ import annotations

import json

import pytest

from cluster_gateway.metrics.served_models import parse_models_list, parse_tgi_info
from cluster_gateway.pool import Endpoint, EndpointPool, PodState
from modelsim import fleet as fleet_mod

from .fake_pods import FakePod, running
from .sim_pool import read_pods_once, sim_pool


def _state(pool: EndpointPool, name: str) -> PodState:
    pod = pool.get(name)
    assert pod is not None
    return pod


async def test_catalog_is_parsed_from_simulated_pods_model_lists() -> None:
    specs = [
        fleet_mod.PodSpec(profile="tiny", model="llama", adapters=["sql-lora", "chat-lora"]),
        fleet_mod.PodSpec(profile="tiny", model="llama", adapters=["sql-lora"], metrics_format="sglang"),
        fleet_mod.PodSpec(profile="tiny", model="qwen", adapters=["math-lora"]),
        fleet_mod.PodSpec(profile="tiny", model="mistral", metrics_format="tgi"),
    ]
    async with fleet_mod.SimFleet(specs) as fleet:
        pool = sim_pool(fleet)
        await read_pods_once(pool)

    a, b, q, t = (_state(pool, f"sim-{i}") for i in range(4))
    assert a.catalog_exact and a.base_models == {"llama"} and a.adapters == {"sql-lora", "chat-lora"}
    assert dict(a.adapter_parents) == {"sql-lora": "llama", "chat-lora": "llama"}
    assert a.models == {"llama", "sql-lora", "chat-lora"}  # the union, for existing callers
    assert b.base_models == {"llama"} and b.adapters == {"sql-lora"}
    assert q.base_models == {"qwen"} and dict(q.adapter_parents) == {"math-lora": "qwen"}
    assert t.base_models == {"mistral"} and t.adapters == frozenset()

    cat = pool.catalog
    assert cat.exact
    assert cat.base_models() == {"llama", "qwen", "mistral"}
    assert cat.adapters() == {"sql-lora", "chat-lora", "math-lora"}
    # Nothing is running: the adapters are known as adapters before any engine reports them.
    assert all(p.metrics is None for p in pool.pods())


async def test_lists_without_parent_info_and_tgi_info_fall_back_sensibly() -> None:
    async with running(
        FakePod("names", b"", models=["llama", "sql-lora"]),  # no `parent` key: kinds unknown
        FakePod("single", b"", models=["qwen"]),  # one entry: it is the base model
        FakePod("tgi", b"", models=["bigscience/bloom"], models_via_info=True),
    ) as pods:
        pool = EndpointPool()
        pool.set_endpoints(p.endpoint() for p in pods)
        await read_pods_once(pool)

    names, single, tgi = (_state(pool, n) for n in ("names", "single", "tgi"))
    assert not names.catalog_exact and names.base_models == {"llama", "sql-lora"} and not names.adapters
    assert single.catalog_exact and single.base_models == {"qwen"}
    assert tgi.catalog_exact and tgi.base_models == {"bigscience/bloom"}
    assert not pool.catalog.exact  # one pod's list did not tell adapters apart


def test_parent_marks_adapters_and_null_parent_marks_base_models() -> None:
    body = json.dumps(
        {
            "object": "list",
            "data": [
                {"id": "llama", "root": "/models/llama", "parent": None},
                {"id": "llama-alias", "root": "/models/llama", "parent": None},
                {"id": "sql-lora", "root": "/adapters/sql", "parent": "llama"},
                {"id": "odd-lora", "root": "/adapters/odd"},  # key missing among entries that have it
                {"id": "self", "parent": "self"},
            ],
        }
    )
    served = parse_models_list(body)
    assert served.exact
    assert served.base_models == {"llama", "llama-alias", "odd-lora", "self"}
    assert served.adapters == {"sql-lora": "llama"}
    assert served.names == {"llama", "llama-alias", "sql-lora", "odd-lora", "self"}
    assert parse_tgi_info('{"model_id": "m"}').base_models == {"m"}


@pytest.mark.parametrize(
    "body",
    ['{"data": {}}', '{"object": "list"}', '{"data": ["x"]}', '{"data": [{"object": "model"}]}', "nope"],
)
def test_malformed_model_lists_are_rejected(body: str) -> None:
    with pytest.raises((ValueError, KeyError, TypeError)):
        parse_models_list(body)


def test_pool_catalog_follows_refreshes_and_departures() -> None:
    pool = EndpointPool()
    pool.set_endpoints(Endpoint(name=n, address="127.0.0.1", port=1) for n in ("a", "b"))
    pool.set_catalog("a", ["llama"], {"sql-lora": "llama"})
    pool.set_catalog("b", ["llama"], {"sql-lora": "llama", "chat-lora": "llama"})
    assert pool.catalog.adapters() == {"sql-lora", "chat-lora"}
    pool.set_catalog("b", ["llama"], {"sql-lora": "llama"})  # chat-lora unloaded from b
    assert pool.catalog.adapters() == {"sql-lora"}
    pool.set_models("a", ["llama", "x"])  # no parent info: names count as base models
    assert pool.catalog.is_base_model("x") and not pool.catalog.exact
    pool.remove("a")
    assert pool.catalog.exact and not pool.catalog.is_base_model("x")
    pool.set_endpoints([])
    assert pool.catalog.base_models() == set() and pool.catalog.adapters() == set()
