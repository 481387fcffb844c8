"""Static discovery: URLs become pool members once; bad URLs are errors naming their index."""

from __future__ import annotations

import asyncio

import pytest

from cluster_gateway.discovery import StaticSource, build_discovery, static_from_urls
from cluster_gateway.pool import EndpointPool
from common.config.gateway import Discovery, GatewaySpec, StaticDiscovery
from common.config.loader import ConfigError, load_config_data


def _spec(endpoints: list[object]) -> GatewaySpec:
    return load_config_data({"discovery": {"static": {"endpoints": endpoints}}}, GatewaySpec)


async def test_static_pool_is_set_once_then_source_idles() -> None:
    spec = _spec(
        [
            "http://127.0.0.1:8001",
            {"url": "http://10.1.2.3:9000/", "engine": "sglang", "labels": {"zone": "a"}},
            {"url": "http://model-b.local:8000", "engine": "auto"},
        ]
    )
    source = build_discovery(spec.discovery)
    assert isinstance(source, StaticSource)
    pool = EndpointPool()
    task = asyncio.create_task(source.run(pool))
    await asyncio.sleep(0.05)
    assert not task.done(), "a static source keeps running (idle) until cancelled"
    by_name = {p.name: p.endpoint for p in pool.pods()}
    assert list(by_name) == ["http://127.0.0.1:8001", "http://10.1.2.3:9000", "http://model-b.local:8000"]
    first = by_name["http://127.0.0.1:8001"]
    assert (first.address, first.port, first.engine, dict(first.labels)) == ("127.0.0.1", 8001, None, {})
    second = by_name["http://10.1.2.3:9000"]
    assert (second.engine, dict(second.labels), second.url) == (
        "sglang",
        {"zone": "a"},
        "http://10.1.2.3:9000",
    )
    assert by_name["http://model-b.local:8000"].engine is None
    version = pool.version
    await asyncio.sleep(0.05)
    assert pool.version == version, "membership is written once"
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task


def test_ipv6_endpoint_keeps_brackets_for_urls() -> None:
    source = build_discovery(static_from_urls(["http://[::1]:8000"]))
    assert isinstance(source, StaticSource)
    (ep,) = source.endpoints
    assert (ep.name, ep.url, ep.hostport) == ("http://[::1]:8000", "http://[::1]:8000", "[::1]:8000")


@pytest.mark.parametrize(
    ("bad", "why"),
    [
        ("127.0.0.1:8000", "missing scheme"),
        ("https://127.0.0.1:8000", "scheme must be http"),
        ("http://127.0.0.1", "missing port"),
        ("http://127.0.0.1:99999", "invalid URL"),
        ("http://127.0.0.1:0", "port must be"),
        ("http://:8000", "missing host"),
        ("http://127.0.0.1:8000/v1", "no path"),
        ("http://user:pw@127.0.0.1:8000", "credentials"),
        ("http://127.0.0.1:abc", "invalid URL"),
    ],
)
def test_bad_url_error_names_the_entry(bad: str, why: str) -> None:
    spec = _spec(["http://127.0.0.1:8001", {"url": bad}])
    with pytest.raises(ConfigError) as err:
        build_discovery(spec.discovery)
    msg = str(err.value)
    assert msg.startswith("discovery.static.endpoints[1]:"), msg
    assert why in msg and bad in msg


def test_duplicate_url_is_rejected() -> None:
    spec = _spec(["http://127.0.0.1:8001", "http://127.0.0.1:8002", "http://127.0.0.1:8001/"])
    with pytest.raises(ConfigError, match=r"endpoints\[2\].*duplicates discovery.static.endpoints\[0\]"):
        build_discovery(spec.discovery)


def test_static_from_urls_feeds_the_cli_pods_flag() -> None:
    discovery = static_from_urls(["http://127.0.0.1:8001", " http://127.0.0.1:8002 ", ""])
    assert discovery.kubernetes is None and discovery.static is not None
    source = build_discovery(discovery)
    assert isinstance(source, StaticSource)
    assert [e.port for e in source.endpoints] == [8001, 8002]
    with pytest.raises(ConfigError, match="--pods"):
        static_from_urls([" ", ""])


def test_bad_url_from_cli_names_its_position() -> None:
    with pytest.raises(ConfigError, match=r"endpoints\[1\].*missing port"):
        build_discovery(static_from_urls(["http://127.0.0.1:8001", "http://127.0.0.1"]))


def test_exactly_one_section_is_required() -> None:
    with pytest.raises(ConfigError, match="exactly one"):
        load_config_data({"discovery": {}}, GatewaySpec)
    # Constructed in code without the schema's own check, the builder still refuses.
    neither = Discovery(static=StaticDiscovery())
    neither.static = None
    with pytest.raises(ConfigError, match="found: none"):
        build_discovery(neither)
