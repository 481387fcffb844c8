"""An upstream InferencePool decides which pods and which port: its selector and first targetPort
are honoured, and edits to the pool object re-target discovery without a restart."""

from __future__ import annotations

import asyncio
import contextlib
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes import client

from cluster_gateway.discovery import build_discovery
from cluster_gateway.discovery.kubernetes import KubernetesSource, target_from_inference_pool
from cluster_gateway.k8s.reflector import WatchTimings
from cluster_gateway.pool import EndpointPool
from common.config.gateway import (
    INFERENCE_POOL_GROUP,
    INFERENCE_POOL_PLURAL,
    INFERENCE_POOL_VERSION,
    GatewaySpec,
    KubernetesDiscovery,
)
from common.config.loader import ConfigError, load_config_data
from tests.cluster_gateway.k8s.fake_apiserver import FakeApiServer, custom_collection, make_pod
from tests.eventually import eventually

FAST = WatchTimings(min_watch_s=30, backoff_initial_s=0.02, backoff_max_s=0.2, early_end_s=0.2)
POOLS = custom_collection(INFERENCE_POOL_GROUP, INFERENCE_POOL_VERSION, INFERENCE_POOL_PLURAL)


def inference_pool(
    name: str, match_labels: dict[str, str], ports: list[int], ns: str = "models"
) -> dict[str, Any]:
    return {
        "apiVersion": f"{INFERENCE_POOL_GROUP}/{INFERENCE_POOL_VERSION}",
        "kind": "InferencePool",
        "metadata": {"name": name, "namespace": ns},
        "spec": {
            "selector": {"matchLabels": match_labels},
            "targetPorts": [{"number": p} for p in ports],
            "endpointPickerRef": {"name": "fleetgate", "port": {"number": 9002}, "failureMode": "FailClose"},
        },
    }


def _endpoints(pool: EndpointPool) -> set[tuple[str, str]]:
    return {(p.name, p.endpoint.hostport) for p in pool.pods()}


async def _stop(task: asyncio.Task[None]) -> None:
    task.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await task


async def test_selector_and_first_target_port_come_from_the_inference_pool(
    apiserver: FakeApiServer, api_client: client.ApiClient
) -> None:
    apiserver.put(POOLS, inference_pool("llama", {"app": "llama", "gen": "1"}, [8001, 8002]))
    apiserver.put_pod(make_pod("p1", "10.0.0.1", labels={"app": "llama", "gen": "1"}, namespace="models"))
    apiserver.put_pod(make_pod("p2", "10.0.0.2", labels={"app": "llama", "gen": "2"}, namespace="models"))
    apiserver.put_pod(make_pod("p3", "10.0.0.3", labels={"app": "llama", "gen": "1"}))  # other namespace
    cfg = KubernetesDiscovery(namespace="models", inference_pool="llama", target_port=9999)
    pool = EndpointPool()
    task = asyncio.create_task(KubernetesSource(cfg, api_client, timings=FAST).run(pool))
    try:
        await eventually(
            lambda: _endpoints(pool) == {("p1", "10.0.0.1:8001")}, 2.0, "pool from InferencePool"
        )
        got = [r for r in apiserver.requests if r.path.endswith("/inferencepools/llama")]
        assert got and got[0].method == "GET"
        assert got[0].path == "/apis/inference.networking.k8s.io/v1/namespaces/models/inferencepools/llama"
        assert apiserver.list_requests()[0].query["labelSelector"] == "app=llama,gen=1"
    finally:
        await _stop(task)


async def test_editing_the_inference_pool_retargets_pods_and_port(
    apiserver: FakeApiServer, api_client: client.ApiClient
) -> None:
    apiserver.put(POOLS, inference_pool("llama", {"gen": "1"}, [8001], ns="default"))
    apiserver.put_pod(make_pod("old", "10.0.0.1", labels={"gen": "1"}))
    apiserver.put_pod(make_pod("new", "10.0.0.2", labels={"gen": "2"}))
    cfg = KubernetesDiscovery(inference_pool="llama")
    source = KubernetesSource(cfg, api_client, timings=FAST)
    pool = EndpointPool()
    task = asyncio.create_task(source.run(pool))
    try:
        await eventually(lambda: _endpoints(pool) == {("old", "10.0.0.1:8001")}, 2.0, "initial pool")
        await eventually(lambda: apiserver.open_watches == 2, 2.0, "pool and pod watches open")

        apiserver.put(POOLS, inference_pool("llama", {"gen": "1"}, [8100], ns="default"))
        await eventually(lambda: _endpoints(pool) == {("old", "10.0.0.1:8100")}, 1.0, "port change applied")

        apiserver.put(POOLS, inference_pool("llama", {"gen": "2"}, [8100], ns="default"))
        await eventually(
            lambda: _endpoints(pool) == {("new", "10.0.0.2:8100")}, 1.0, "selector change applied"
        )
        await eventually(lambda: apiserver.open_watches == 2, 1.0, "the old pod watch was closed")

        apiserver.put_pod(make_pod("newer", "10.0.0.3", labels={"gen": "2"}))
        await eventually(lambda: len(pool) == 2, 1.0, "new pod watch is live")
    finally:
        await _stop(task)


async def test_missing_inference_pool_is_awaited_and_unusable_edits_are_ignored(
    apiserver: FakeApiServer, api_client: client.ApiClient
) -> None:
    apiserver.put_pod(make_pod("p1", "10.0.0.1", labels={"app": "x"}))
    source = KubernetesSource(KubernetesDiscovery(inference_pool="late"), api_client, timings=FAST)
    pool = EndpointPool()
    task = asyncio.create_task(source.run(pool))
    try:
        await eventually(lambda: apiserver.open_watches == 1, 2.0, "watching for the pool object")
        assert len(pool) == 0
        apiserver.put(POOLS, inference_pool("late", {"app": "x"}, [8000], ns="default"))
        await eventually(lambda: _endpoints(pool) == {("p1", "10.0.0.1:8000")}, 1.0, "pool created later")

        broken = inference_pool("late", {"app": "x"}, [], ns="default")  # no targetPorts: keep going
        apiserver.put(POOLS, broken)
        apiserver.delete(POOLS, "late")  # deletion keeps the last known pods serving
        await asyncio.sleep(0.2)
        assert _endpoints(pool) == {("p1", "10.0.0.1:8000")}
        assert not task.done()
    finally:
        await _stop(task)


@pytest.mark.parametrize(
    ("spec", "why"),
    [
        ({"targetPorts": [{"number": 8000}]}, "matchLabels"),
        ({"selector": {"matchLabels": {"a": "b"}}}, "targetPorts"),
        ({"selector": {"matchLabels": {"a": "b"}}, "targetPorts": [{"number": 0}]}, "number"),
    ],
)
def test_unusable_inference_pool_spec_names_the_field(spec: dict[str, Any], why: str) -> None:
    with pytest.raises(ValueError, match=why):
        target_from_inference_pool({"spec": spec})


def test_kubernetes_section_needs_a_pool_or_a_selector(api_client: client.ApiClient) -> None:
    with pytest.raises(ConfigError, match="inferencePool"):
        KubernetesSource(KubernetesDiscovery(), api_client)


def _kubeconfig(tmp_path: Path, server: str) -> Path:
    path = tmp_path / "kubeconfig"
    path.write_text(
        yaml.safe_dump(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "clusters": [{"name": "test", "cluster": {"server": server}}],
                "users": [{"name": "gw", "user": {"token": "t0ken"}}],
                "contexts": [{"name": "test", "context": {"cluster": "test", "user": "gw"}}],
                "current-context": "test",
            }
        )
    )
    return path


async def test_build_discovery_uses_the_kubeconfig_file(apiserver: FakeApiServer, tmp_path: Path) -> None:
    apiserver.put_pod(make_pod("p1", "10.0.0.1", labels={"app": "x"}))
    path = _kubeconfig(tmp_path, apiserver.url)
    spec = load_config_data(
        {
            "discovery": {
                "kubernetes": {
                    "kubeconfig": str(path),
                    "selector": {"matchLabels": {"app": "x"}},
                    "targetPort": 8080,
                }
            }
        },
        GatewaySpec,
    )
    source = build_discovery(spec.discovery)
    assert isinstance(source, KubernetesSource)
    pool = EndpointPool()
    task = asyncio.create_task(source.run(pool))
    try:
        await eventually(lambda: _endpoints(pool) == {("p1", "10.0.0.1:8080")}, 2.0, "pool via kubeconfig")
        assert apiserver.requests[0].headers.get("authorization") == "Bearer t0ken"
    finally:
        await _stop(task)


def test_bad_kubeconfig_is_a_config_error_naming_the_field(tmp_path: Path) -> None:
    spec = load_config_data(
        {"discovery": {"kubernetes": {"kubeconfig": str(tmp_path / "nope"), "inferencePool": "p"}}},
        GatewaySpec,
    )
    with pytest.raises(ConfigError, match=r"discovery\.kubernetes\.kubeconfig: .*does not exist"):
        build_discovery(spec.discovery)
    garbage = tmp_path / "garbage"
    garbage.write_text("apiVersion: v1\nkind: Config\n")
    spec.discovery.kubernetes.kubeconfig = str(garbage)  # type: ignore[union-attr]
    with pytest.raises(ConfigError, match=r"discovery\.kubernetes\.kubeconfig: cannot use kubeconfig"):
        build_discovery(spec.discovery)


def test_no_kubeconfig_outside_a_cluster_is_a_clear_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    spec = load_config_data({"discovery": {"kubernetes": {"inferencePool": "p"}}}, GatewaySpec)
    with pytest.raises(ConfigError, match="not running inside a Kubernetes pod"):
        build_discovery(spec.discovery)
