"""The CR's status subresource: right conditions and counts, merge-patched, change-only, rate-limited."""

from __future__ import annotations

import asyncio
import logging
from datetime import UTC, datetime, timedelta
from typing import Any

import msgspec
import pytest
from kubernetes import client

from cluster_gateway.k8s.status import MERGE_PATCH, StatusReporter
from common.config.crd import GatewayStatus
from common.config.gateway import CRD_GROUP, CRD_KIND, CRD_PLURAL, CRD_VERSION
from tests.cluster_gateway.k8s.fake_apiserver import FakeApiServer, RecordedRequest, custom_collection
from tests.eventually import eventually

GATEWAYS = custom_collection(CRD_GROUP, CRD_VERSION, CRD_PLURAL)
SPEC = {"discovery": {"static": {"endpoints": ["http://10.0.0.1:8000"]}}}


def _create_cr(apiserver: FakeApiServer) -> None:
    apiserver.put(
        GATEWAYS,
        {
            "apiVersion": f"{CRD_GROUP}/{CRD_VERSION}",
            "kind": CRD_KIND,
            "metadata": {"name": "gw", "namespace": "prod"},
            "spec": SPEC,
        },
    )


def _patches(apiserver: FakeApiServer) -> list[RecordedRequest]:
    return [r for r in apiserver.requests if r.method == "PATCH"]


def _conditions(status: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {c["type"]: c for c in status["conditions"]}


async def test_patch_carries_counts_and_conditions(
    apiserver: FakeApiServer, api_client: client.ApiClient
) -> None:
    _create_cr(apiserver)
    reporter = StatusReporter(api_client, "prod", "gw", generation=4)
    await reporter.report(endpoints=5, ready=3, stale=2, router_connected=True)
    (patch,) = _patches(apiserver)
    assert patch.path == "/apis/fleetgate.io/v1alpha1/namespaces/prod/fleetgategateways/gw/status"
    assert patch.content_type == MERGE_PATCH
    status = patch.body["status"]
    msgspec.convert(status, GatewayStatus)  # fits the CRD's status schema exactly
    assert {k: status[k] for k in ("endpoints", "readyEndpoints", "stalePods", "observedGeneration")} == {
        "endpoints": 5,
        "readyEndpoints": 3,
        "stalePods": 2,
        "observedGeneration": 4,
    }
    assert status["routerConnected"] is True
    cond = _conditions(status)
    assert list(cond) == ["Ready", "EndpointsDiscovered", "StalePods", "GlobalRouterConnected"]
    assert (cond["Ready"]["status"], cond["Ready"]["reason"]) == ("True", "EndpointsReady")
    assert cond["Ready"]["message"] == "3 of 5 endpoints ready"
    assert (cond["EndpointsDiscovered"]["status"], cond["EndpointsDiscovered"]["reason"]) == (
        "True",
        "EndpointsFound",
    )
    assert (cond["StalePods"]["status"], cond["StalePods"]["reason"]) == ("True", "MetricsStale")
    assert cond["StalePods"]["message"] == "2 of 5 pods have stale metrics"
    assert (cond["GlobalRouterConnected"]["status"], cond["GlobalRouterConnected"]["reason"]) == (
        "True",
        "Connected",
    )
    assert all(c["observedGeneration"] == 4 and c["lastTransitionTime"].endswith("Z") for c in cond.values())
    stored = apiserver.get(GATEWAYS, "gw", "prod")
    assert stored is not None and stored["status"] == status and stored["spec"] == SPEC


async def test_nothing_ready_and_no_router_configured(
    apiserver: FakeApiServer, api_client: client.ApiClient
) -> None:
    _create_cr(apiserver)
    await StatusReporter(api_client, "prod", "gw").report(
        endpoints=0, ready=0, stale=0, router_connected=None
    )
    cond = _conditions(_patches(apiserver)[0].body["status"])
    assert (cond["Ready"]["status"], cond["Ready"]["reason"]) == ("False", "NoReadyEndpoints")
    assert (cond["EndpointsDiscovered"]["status"], cond["EndpointsDiscovered"]["reason"]) == (
        "False",
        "NoEndpoints",
    )
    assert (cond["StalePods"]["status"], cond["StalePods"]["reason"]) == ("False", "MetricsFresh")
    router = cond["GlobalRouterConnected"]
    assert (router["status"], router["reason"]) == ("Unknown", "NotConfigured")


async def test_router_disconnected_is_reported(
    apiserver: FakeApiServer, api_client: client.ApiClient
) -> None:
    _create_cr(apiserver)
    await StatusReporter(api_client, "prod", "gw").report(
        endpoints=2, ready=2, stale=0, router_connected=False
    )
    router = _conditions(_patches(apiserver)[0].body["status"])["GlobalRouterConnected"]
    assert (router["status"], router["reason"]) == ("False", "Disconnected")


async def test_unchanged_numbers_are_not_patched_again(
    apiserver: FakeApiServer, api_client: client.ApiClient
) -> None:
    _create_cr(apiserver)
    reporter = StatusReporter(api_client, "prod", "gw", min_interval_s=0.05)
    for _ in range(5):
        await reporter.report(endpoints=2, ready=2, stale=0, router_connected=True)
        await asyncio.sleep(0.06)
    assert len(_patches(apiserver)) == 1 and reporter.patches == 1


async def test_at_most_one_patch_per_second_and_the_latest_values_win(
    apiserver: FakeApiServer, api_client: client.ApiClient
) -> None:
    _create_cr(apiserver)
    reporter = StatusReporter(api_client, "prod", "gw")  # default: 1 s
    await reporter.report(endpoints=3, ready=1, stale=0, router_connected=True)
    for ready in (2, 3, 2, 3):  # a burst of changes inside the window
        await reporter.report(endpoints=3, ready=ready, stale=0, router_connected=True)
    assert len(_patches(apiserver)) == 1, "changes inside the window wait"
    await eventually(lambda: len(_patches(apiserver)) == 2, 3.0, "deferred patch")
    first, second = _patches(apiserver)
    assert second.at - first.at >= 0.95
    assert second.body["status"]["readyEndpoints"] == 3
    await asyncio.sleep(1.2)
    assert len(_patches(apiserver)) == 2, "the burst produced exactly one deferred patch"


async def test_transition_time_moves_only_when_a_condition_flips(
    apiserver: FakeApiServer, api_client: client.ApiClient
) -> None:
    _create_cr(apiserver)
    t0 = datetime(2026, 1, 1, 12, 0, 0, tzinfo=UTC)
    now = [t0]
    reporter = StatusReporter(api_client, "prod", "gw", min_interval_s=0.0, wall_clock=lambda: now[0])
    await reporter.report(endpoints=2, ready=1, stale=0, router_connected=True)
    now[0] = t0 + timedelta(minutes=1)
    await reporter.report(endpoints=2, ready=2, stale=0, router_connected=True)  # Ready stays True
    now[0] = t0 + timedelta(minutes=2)
    await reporter.report(endpoints=2, ready=0, stale=2, router_connected=True)  # Ready flips
    p1, p2, p3 = (_conditions(p.body["status"]) for p in _patches(apiserver))
    assert p1["Ready"]["lastTransitionTime"] == "2026-01-01T12:00:00Z"
    assert p2["Ready"]["lastTransitionTime"] == "2026-01-01T12:00:00Z"
    assert p2["Ready"]["message"] == "2 of 2 endpoints ready"
    assert p3["Ready"]["lastTransitionTime"] == "2026-01-01T12:02:00Z"
    assert p3["StalePods"]["lastTransitionTime"] == "2026-01-01T12:02:00Z"
    assert p3["GlobalRouterConnected"]["lastTransitionTime"] == "2026-01-01T12:00:00Z"


async def test_api_failures_are_logged_once_and_retried(
    apiserver: FakeApiServer, api_client: client.ApiClient, caplog: pytest.LogCaptureFixture
) -> None:
    reporter = StatusReporter(api_client, "prod", "gw", min_interval_s=0.05)
    with caplog.at_level(logging.WARNING, logger="cluster_gateway.k8s.status"):
        await reporter.report(endpoints=1, ready=1, stale=0, router_connected=None)  # CR absent: no raise
        await eventually(lambda: len(_patches(apiserver)) >= 3, 2.0, "retries")
    assert reporter.patches == 0
    warnings = [r for r in caplog.records if "cannot update the status" in r.getMessage()]
    assert len(warnings) == 1 and "not found" in warnings[0].getMessage()
    _create_cr(apiserver)
    await eventually(lambda: reporter.patches == 1, 3.0, "patched once the CR exists")
    stored = apiserver.get(GATEWAYS, "gw", "prod")
    assert stored is not None and stored["status"]["endpoints"] == 1


async def test_close_flushes_the_pending_change_and_generation_is_tracked(
    apiserver: FakeApiServer, api_client: client.ApiClient
) -> None:
    _create_cr(apiserver)
    reporter = StatusReporter(api_client, "prod", "gw", generation=1, min_interval_s=30)
    await reporter.report(endpoints=1, ready=1, stale=0, router_connected=None)
    reporter.set_generation(2)
    await reporter.report(endpoints=1, ready=1, stale=0, router_connected=None)  # inside the window
    assert len(_patches(apiserver)) == 1
    await reporter.close()
    patches = _patches(apiserver)
    assert len(patches) == 2 and patches[1].body["status"]["observedGeneration"] == 2
