"""The FleetgateGateway CR as the gateway's config: read, validated like the file, edits followed."""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any

import pytest
from kubernetes import client

from cluster_gateway.k8s.crd_source import CrdConfigSource, GatewayResource, parse_resource_ref
from cluster_gateway.k8s.reflector import WatchTimings
from common.config.gateway import CRD_GROUP, CRD_KIND, CRD_PLURAL, CRD_VERSION
from common.config.loader import ConfigError
from tests.cluster_gateway.k8s.fake_apiserver import FakeApiServer, custom_collection
from tests.eventually import eventually

GATEWAYS = custom_collection(CRD_GROUP, CRD_VERSION, CRD_PLURAL)
FAST = WatchTimings(min_watch_s=30, backoff_initial_s=0.02, backoff_max_s=0.2, early_end_s=0.2)


def gateway_cr(spec: dict[str, Any], name: str = "gw", ns: str = "prod") -> dict[str, Any]:
    return {
        "apiVersion": f"{CRD_GROUP}/{CRD_VERSION}",
        "kind": CRD_KIND,
        "metadata": {"name": name, "namespace": ns},
        "spec": spec,
    }


VALID = {
    "clusterId": "us-east-1a",
    "region": "us-east-1",
    "discovery": {"kubernetes": {"namespace": "models", "inferencePool": "llama"}},
    "scrape": {"intervalMs": 50},
}


def _source(api_client: client.ApiClient, name: str = "gw", ns: str = "prod") -> CrdConfigSource:
    return CrdConfigSource(api_client, ns, name, startup_timeout_s=2.0, timings=FAST)


async def test_spec_is_read_and_validated_as_the_gateway_config(
    apiserver: FakeApiServer, api_client: client.ApiClient
) -> None:
    apiserver.put(GATEWAYS, gateway_cr(VALID))
    res = await _source(api_client).load()
    assert (res.namespace, res.name, res.generation) == ("prod", "gw", 1)
    assert res.spec.cluster_id == "us-east-1a" and res.spec.scrape.interval_ms == 50
    assert res.spec.discovery.kubernetes is not None
    assert res.spec.discovery.kubernetes.inference_pool == "llama"
    (req,) = apiserver.requests
    assert req.path == "/apis/fleetgate.io/v1alpha1/namespaces/prod/fleetgategateways/gw"


@pytest.mark.parametrize(
    ("spec", "field"),
    [
        ({**VALID, "scrape": {"intervalMs": 1}}, "scrape.intervalMs"),
        ({**VALID, "port": 70000}, "port"),
        ({**VALID, "proxy": {"maxAtempts": 2}}, "proxy"),
        ({"clusterId": "x"}, "discovery"),  # required
        ({**VALID, "discovery": {"kubernetes": {"targetPort": "http"}}}, "discovery.kubernetes.targetPort"),
    ],
)
async def test_invalid_spec_error_names_the_resource_and_field(
    apiserver: FakeApiServer, api_client: client.ApiClient, spec: dict[str, Any], field: str
) -> None:
    apiserver.put(GATEWAYS, gateway_cr(spec))
    with pytest.raises(ConfigError) as err:
        await _source(api_client).load()
    msg = str(err.value)
    assert msg.startswith("FleetgateGateway prod/gw: "), msg
    assert f"`{field}`" in msg or field in msg, msg


async def test_missing_resource_is_a_clear_error(
    apiserver: FakeApiServer, api_client: client.ApiClient
) -> None:
    with pytest.raises(ConfigError, match=r"FleetgateGateway prod/absent: not found"):
        await _source(api_client, name="absent").load()


async def test_transient_errors_are_retried_at_startup(
    apiserver: FakeApiServer, api_client: client.ApiClient
) -> None:
    apiserver.put(GATEWAYS, gateway_cr(VALID))
    apiserver.fail_next = [503, 500]
    res = await _source(api_client).load()
    assert res.spec.region == "us-east-1"
    assert len(apiserver.requests) == 3


async def test_forbidden_names_the_missing_permission(
    apiserver: FakeApiServer, api_client: client.ApiClient
) -> None:
    apiserver.fail_next = [403]
    with pytest.raises(ConfigError, match=r"access denied.*fleetgategateways"):
        await _source(api_client).load()


async def test_watch_reports_new_valid_generations_and_rejects_bad_ones(
    apiserver: FakeApiServer, api_client: client.ApiClient
) -> None:
    apiserver.put(GATEWAYS, gateway_cr(VALID))
    source = _source(api_client)
    first = await source.load()
    changes: list[GatewayResource] = []
    rejected: list[ConfigError] = []
    task = asyncio.create_task(source.watch(changes.append, rejected.append))
    try:
        await eventually(lambda: apiserver.open_watches == 1, 2.0, "watch open")
        assert changes == [], "the generation already loaded is not reported again"

        apiserver.put(GATEWAYS, gateway_cr({**VALID, "scrape": {"intervalMs": 200}}))
        await eventually(lambda: len(changes) == 1, 1.0, "edit reported")
        assert changes[0].generation == first.generation + 1
        assert changes[0].spec.scrape.interval_ms == 200

        stored = apiserver.get(GATEWAYS, "gw", "prod")
        assert stored is not None
        apiserver.put(GATEWAYS, {**stored, "status": {"endpoints": 3}})  # status only: same generation
        apiserver.put(GATEWAYS, gateway_cr({**VALID, "scrape": {"intervalMs": 2}}))
        await eventually(lambda: len(rejected) == 1, 1.0, "bad edit rejected")
        assert "scrape.intervalMs" in str(rejected[0])
        assert len(changes) == 1 and source.current is not None
        assert source.current.spec.scrape.interval_ms == 200, "the last good spec stays current"
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task


@pytest.mark.parametrize(
    ("ref", "expected"),
    [("prod/gw", ("prod", "gw")), ("gw", ("fallback", "gw")), (" prod/gw ", ("prod", "gw"))],
)
def test_resource_reference_parsing(ref: str, expected: tuple[str, str]) -> None:
    assert parse_resource_ref(ref, default_namespace="fallback") == expected


@pytest.mark.parametrize("ref", ["", "prod/", "a/b/c"])
def test_bad_resource_reference_is_rejected(ref: str) -> None:
    with pytest.raises(ConfigError, match="NAMESPACE/NAME"):
        parse_resource_ref(ref, default_namespace="fallback")
