"""Cross-check against a second, independent API emulator (kmock): read the CR, patch its status.

kmock's watch does not work with the official client, so only get/patch are checked here; watches
are covered by `fake_apiserver`.
"""

from __future__ import annotations

from typing import Any

import kmock as kmock_lib
from kubernetes import client

from cluster_gateway.k8s.crd_source import CrdConfigSource
from cluster_gateway.k8s.status import MERGE_PATCH, StatusReporter
from common.config.gateway import CRD_GROUP, CRD_KIND, CRD_PLURAL, CRD_VERSION

RESOURCE = f"{CRD_GROUP}/{CRD_VERSION}/{CRD_PLURAL}"


async def test_cr_is_read_and_status_patched_on_kmock(kmock: Any) -> None:
    kmock.resources[RESOURCE] = kmock_resource_info()
    kmock.objects[RESOURCE, "prod", "gw"] = {
        "apiVersion": f"{CRD_GROUP}/{CRD_VERSION}",
        "kind": CRD_KIND,
        "metadata": {"name": "gw", "namespace": "prod", "generation": 2},
        "spec": {"clusterId": "c9", "discovery": {"static": {"endpoints": ["http://10.0.0.1:8000"]}}},
    }
    api = client.ApiClient(client.Configuration(host=str(kmock.url).rstrip("/")))
    res = await CrdConfigSource(api, "prod", "gw").load()
    assert res.spec.cluster_id == "c9" and res.generation == 2

    reporter = StatusReporter(api, "prod", "gw", generation=res.generation)
    await reporter.report(endpoints=4, ready=4, stale=1, router_connected=False)
    assert reporter.patches == 1
    status = kmock.objects[RESOURCE, "prod", "gw"].raw["status"]
    assert (
        status["endpoints"],
        status["readyEndpoints"],
        status["stalePods"],
        status["observedGeneration"],
    ) == (
        4,
        4,
        1,
        2,
    )
    conditions = {c["type"]: (c["status"], c["reason"]) for c in status["conditions"]}
    assert conditions == {
        "Ready": ("True", "EndpointsReady"),
        "EndpointsDiscovered": ("True", "EndpointsFound"),
        "StalePods": ("True", "MetricsStale"),
        "GlobalRouterConnected": ("False", "Disconnected"),
    }
    requests = list(kmock)
    assert [(str(r.method.value), r.url.path) for r in requests] == [
        ("GET", "/apis/fleetgate.io/v1alpha1/namespaces/prod/fleetgategateways/gw"),
        ("PATCH", "/apis/fleetgate.io/v1alpha1/namespaces/prod/fleetgategateways/gw/status"),
    ]
    assert requests[1].headers.get("Content-Type") == MERGE_PATCH


def kmock_resource_info() -> Any:
    return kmock_lib.ResourceInfo(
        kind=CRD_KIND, namespaced=True, subresources={"status"}, verbs={"get", "list", "watch", "patch"}
    )
