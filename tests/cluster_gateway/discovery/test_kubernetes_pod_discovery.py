"""Kubernetes discovery through the real `kubernetes` client against an emulated API server.

Proves: only Ready pods with an IP that are not terminating are used; adds, deletes and readiness
changes reach the pool within a second; a dropped watch resumes from the last resourceVersion
(events and bookmarks); 410 Gone triggers a relist; API errors are retried; engine label mapping.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import time
from collections.abc import AsyncIterator

import pytest
from kubernetes import client

from cluster_gateway.discovery.kubernetes import ENGINE_LABEL, KubernetesSource, endpoint_from_pod
from cluster_gateway.k8s.reflector import Reflector, WatchTimings
from cluster_gateway.pool import EndpointPool
from common.config.gateway import KubernetesDiscovery, LabelSelector
from tests.cluster_gateway.k8s.fake_apiserver import FakeApiServer, make_pod
from tests.eventually import eventually

FAST = WatchTimings(min_watch_s=30, backoff_initial_s=0.02, backoff_max_s=0.2, early_end_s=0.2)
APP = {"app": "llama"}


def _names(pool: EndpointPool) -> set[str]:
    return {p.name for p in pool.pods()}


@contextlib.asynccontextmanager
async def running(source: KubernetesSource, pool: EndpointPool) -> AsyncIterator[asyncio.Task[None]]:
    task = asyncio.create_task(source.run(pool))
    try:
        yield task
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task


@contextlib.asynccontextmanager
async def watching(apiserver: FakeApiServer, source: KubernetesSource) -> AsyncIterator[EndpointPool]:
    """A pool fed by `source`, handed over once its watch is open (so the initial list is applied)."""
    pool = EndpointPool()
    async with running(source, pool):
        await eventually(lambda: apiserver.open_watches == 1, 2.0, "watch start")
        yield pool


def _selector_source(api_client: client.ApiClient, port: int = 8000) -> KubernetesSource:
    cfg = KubernetesDiscovery(namespace="default", selector=LabelSelector(match_labels=APP), target_port=port)
    return KubernetesSource(cfg, api_client, timings=FAST)


async def test_only_ready_pods_with_ip_that_are_not_terminating_are_used(
    apiserver: FakeApiServer, api_client: client.ApiClient
) -> None:
    apiserver.put_pod(make_pod("ready", "10.0.0.1", labels={**APP, ENGINE_LABEL: "vllm", "tier": "a"}))
    apiserver.put_pod(make_pod("unready", "10.0.0.2", ready=False, labels=APP))
    apiserver.put_pod(make_pod("no-ip", None, labels=APP))
    apiserver.put_pod(make_pod("terminating", "10.0.0.4", deleting=True, labels=APP))
    apiserver.put_pod(make_pod("other-app", "10.0.0.5", labels={"app": "other"}))
    apiserver.put_pod(make_pod("other-ns", "10.0.0.6", labels=APP, namespace="elsewhere"))
    async with watching(apiserver, _selector_source(api_client, port=8123)) as pool:
        assert _names(pool) == {"ready"}
        ep = pool.pods()[0].endpoint
        assert (ep.address, ep.port, ep.engine) == ("10.0.0.1", 8123, "vllm")
        assert dict(ep.labels) == {**APP, ENGINE_LABEL: "vllm", "tier": "a"}
        listed = apiserver.list_requests()[0]
        assert listed.path == "/api/v1/namespaces/default/pods"
        assert listed.query["labelSelector"] == "app=llama"


async def test_membership_follows_add_delete_and_readiness_within_a_second(
    apiserver: FakeApiServer, api_client: client.ApiClient
) -> None:
    apiserver.put_pod(make_pod("a", "10.0.0.1", labels=APP))
    async with watching(apiserver, _selector_source(api_client)) as pool:
        assert _names(pool) == {"a"}

        apiserver.put_pod(make_pod("b", "10.0.0.2", labels=APP))
        await eventually(lambda: _names(pool) == {"a", "b"}, 1.0, "added pod joins")

        apiserver.put_pod(make_pod("b", "10.0.0.2", ready=False, labels=APP))
        await eventually(lambda: _names(pool) == {"a"}, 1.0, "unready pod leaves")

        apiserver.put_pod(make_pod("b", "10.0.0.9", labels=APP))
        await eventually(lambda: _names(pool) == {"a", "b"}, 1.0, "ready again rejoins")
        assert pool.get("b").endpoint.address == "10.0.0.9"  # type: ignore[union-attr]

        apiserver.put_pod(make_pod("a", "10.0.0.1", deleting=True, labels=APP))
        await eventually(lambda: _names(pool) == {"b"}, 1.0, "terminating pod leaves")

        apiserver.delete_pod("b")
        await eventually(lambda: _names(pool) == set(), 1.0, "deleted pod leaves")
        assert len(apiserver.list_requests()) == 1, "events alone kept the pool current"


async def test_unchanged_pod_updates_do_not_churn_the_pool(
    apiserver: FakeApiServer, api_client: client.ApiClient
) -> None:
    apiserver.put_pod(make_pod("a", "10.0.0.1", labels=APP))
    source = _selector_source(api_client)
    async with watching(apiserver, source) as pool:
        version = pool.version
        pod = make_pod("a", "10.0.0.1", labels=APP)
        pod["status"]["conditions"].append({"type": "ContainersReady", "status": "True"})
        apiserver.put_pod(pod)  # a status heartbeat that changes nothing we use
        assert source.pod_reflector is not None
        reflector: Reflector = source.pod_reflector
        await eventually(lambda: reflector.resource_version == str(apiserver.rv), 1.0, "event seen")
        assert pool.version == version


async def test_dropped_watch_resumes_from_last_resource_version(
    apiserver: FakeApiServer, api_client: client.ApiClient
) -> None:
    apiserver.put_pod(make_pod("a", "10.0.0.1", labels=APP))
    async with watching(apiserver, _selector_source(api_client)) as pool:
        apiserver.put_pod(make_pod("b", "10.0.0.2", labels=APP))
        await eventually(lambda: _names(pool) == {"a", "b"}, 1.0, "b joins")
        last_rv = apiserver.rv

        assert apiserver.drop_watches(abrupt=True) == 1  # connection cut mid-stream
        await eventually(lambda: len(apiserver.watch_requests()) == 2, 2.0, "watch resumes")
        assert apiserver.watch_requests()[1].query["resourceVersion"] == str(last_rv)

        apiserver.bookmark()  # a bookmark moves the resume point without any object change
        await asyncio.sleep(0.1)
        bookmark_rv = apiserver.rv
        apiserver.drop_watches(abrupt=False)  # server-side end of the watch
        await eventually(lambda: len(apiserver.watch_requests()) == 3, 2.0, "watch resumes again")
        assert apiserver.watch_requests()[2].query["resourceVersion"] == str(bookmark_rv)
        assert apiserver.watch_requests()[2].query["allowWatchBookmarks"] == "true"

        apiserver.delete_pod("a")
        await eventually(lambda: _names(pool) == {"b"}, 1.0, "events after resuming still apply")
        assert len(apiserver.list_requests()) == 1, "resuming never relists"


async def test_changes_while_disconnected_are_replayed_on_resume(
    apiserver: FakeApiServer, api_client: client.ApiClient
) -> None:
    apiserver.put_pod(make_pod("a", "10.0.0.1", labels=APP))
    async with watching(apiserver, _selector_source(api_client)) as pool:
        apiserver.fail_next = [503]  # the first reconnect fails; the retry must still resume, not relist
        apiserver.drop_watches(abrupt=True)
        apiserver.put_pod(make_pod("b", "10.0.0.2", labels=APP))  # happens while no watch is open
        await eventually(lambda: _names(pool) == {"a", "b"}, 2.0, "missed event replayed")
        assert len(apiserver.list_requests()) == 1


async def test_gone_410_triggers_a_relist(apiserver: FakeApiServer, api_client: client.ApiClient) -> None:
    apiserver.put_pod(make_pod("a", "10.0.0.1", labels=APP))
    apiserver.put_pod(make_pod("b", "10.0.0.2", labels=APP))
    source = _selector_source(api_client)
    async with watching(apiserver, source) as pool:
        assert _names(pool) == {"a", "b"}
        apiserver.drop_watches(abrupt=True)
        # While disconnected: history is compacted and the world changes.
        apiserver.delete_pod("a")
        apiserver.put_pod(make_pod("c", "10.0.0.3", labels=APP))
        apiserver.compact()
        await eventually(lambda: len(apiserver.list_requests()) == 2, 2.0, "relist after 410")
        await eventually(lambda: _names(pool) == {"b", "c"}, 1.0, "relisted state applied")
        assert source.pod_reflector is not None and source.pod_reflector.relists == 2
        await eventually(lambda: apiserver.open_watches == 1, 2.0, "watching again")
        resumed = apiserver.watch_requests()[-1]
        assert int(resumed.query["resourceVersion"]) >= apiserver.compacted_rv - 1
        apiserver.put_pod(make_pod("d", "10.0.0.4", labels=APP))
        await eventually(lambda: _names(pool) == {"b", "c", "d"}, 1.0, "watch works after relist")


async def test_api_errors_are_retried_with_backoff(
    apiserver: FakeApiServer, api_client: client.ApiClient
) -> None:
    apiserver.put_pod(make_pod("a", "10.0.0.1", labels=APP))
    apiserver.fail_next = [500, 503, 429]
    pool = EndpointPool()
    async with running(_selector_source(api_client), pool):
        await eventually(lambda: _names(pool) == {"a"}, 3.0, "pool filled after errors")
        lists = apiserver.list_requests()
        assert len(lists) == 4
        gaps = [b.at - a.at for a, b in itertools.pairwise(lists)]
        assert all(g > 0 for g in gaps)


@pytest.mark.parametrize(
    ("label", "engine"),
    [
        ("vllm", "vllm"),
        ("sglang", "sglang"),
        ("tgi", "tgi"),
        ("SGLang", "sglang"),
        ("trtllm", None),
        (None, None),
    ],
)
def test_engine_comes_from_the_engine_type_label(label: str | None, engine: str | None) -> None:
    labels = {**APP} if label is None else {**APP, ENGINE_LABEL: label}
    ep = endpoint_from_pod(make_pod("p", "10.0.0.1", labels=labels), 8000)
    assert ep is not None and ep.engine == engine


async def test_cancel_closes_watch_connections(
    apiserver: FakeApiServer, api_client: client.ApiClient
) -> None:
    pool = EndpointPool()
    task = asyncio.create_task(_selector_source(api_client).run(pool))
    await eventually(lambda: apiserver.open_watches == 1, 2.0, "watch start")
    task.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await task
    await eventually(lambda: apiserver.open_watches == 0, 1.0, "watch connection closed")


async def test_shutdown_is_prompt_even_while_an_api_call_hangs(
    apiserver: FakeApiServer, api_client: client.ApiClient
) -> None:
    apiserver.hang_next = 1  # the initial list never answers

    async def gateway_lifetime() -> None:
        task = asyncio.create_task(_selector_source(api_client).run(EndpointPool()))
        await eventually(lambda: bool(apiserver.requests), 2.0, "list sent")
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task

    def whole_process_loop() -> float:
        started = time.monotonic()
        asyncio.run(gateway_lifetime())  # includes the loop's executor shutdown
        return time.monotonic() - started

    took = await asyncio.wait_for(asyncio.to_thread(whole_process_loop), 10)
    assert took < 2.0, f"shutdown waited {took:.1f}s for a hung API request"


async def test_large_pools_are_listed_in_pages(
    apiserver: FakeApiServer, api_client: client.ApiClient
) -> None:
    for i in range(7):
        apiserver.put_pod(make_pod(f"p{i}", f"10.0.0.{i + 1}", labels=APP))
    apiserver.put_pod(make_pod("unready", "10.0.1.1", ready=False, labels=APP))
    cfg = KubernetesDiscovery(selector=LabelSelector(match_labels=APP))
    source = KubernetesSource(cfg, api_client, timings=FAST, list_page_size=3)
    async with watching(apiserver, source) as pool:
        assert _names(pool) == {f"p{i}" for i in range(7)}
        pages = apiserver.list_requests()
        assert [r.query.get("limit") for r in pages] == ["3", "3", "3"]
        assert "continue" not in pages[0].query and all("continue" in r.query for r in pages[1:])
        assert apiserver.watch_requests()[0].query["resourceVersion"] == str(apiserver.rv)


async def test_expired_continue_token_restarts_the_list(
    apiserver: FakeApiServer, api_client: client.ApiClient
) -> None:
    for i in range(5):
        apiserver.put_pod(make_pod(f"p{i}", f"10.0.0.{i + 1}", labels=APP))
    apiserver.expire_next_continue = 1
    cfg = KubernetesDiscovery(selector=LabelSelector(match_labels=APP))
    source = KubernetesSource(cfg, api_client, timings=FAST, list_page_size=2)
    pool = EndpointPool()
    async with running(source, pool):
        await eventually(lambda: len(pool) == 5, 2.0, "full pool after the restarted list")
        starts = [r for r in apiserver.list_requests() if "continue" not in r.query]
        assert len(starts) == 2, "the list restarted from its first page"


async def test_repeated_gone_backs_off_instead_of_spinning(
    apiserver: FakeApiServer, api_client: client.ApiClient
) -> None:
    apiserver.put_pod(make_pod("a", "10.0.0.1", labels=APP))
    apiserver.compacted_rv = 10**9  # a broken server: every watch is answered with 410 Gone
    pool = EndpointPool()
    source = _selector_source(api_client)
    async with running(source, pool):
        await asyncio.sleep(1.0)
        assert _names(pool) == {"a"}, "the listed state keeps serving"
        relists = len(apiserver.list_requests())
    assert 3 <= relists <= 40, f"{relists} relists in 1s"


async def test_watch_error_event_resumes_without_relisting(
    apiserver: FakeApiServer, api_client: client.ApiClient
) -> None:
    apiserver.put_pod(make_pod("a", "10.0.0.1", labels=APP))
    async with watching(apiserver, _selector_source(api_client)) as pool:
        rv = apiserver.rv
        assert apiserver.watch_error(500) == 1  # e.g. "etcdserver: leader changed"
        await eventually(lambda: len(apiserver.watch_requests()) == 2, 2.0, "watch reopened")
        assert apiserver.watch_requests()[1].query["resourceVersion"] == str(rv)
        apiserver.put_pod(make_pod("b", "10.0.0.2", labels=APP))
        await eventually(lambda: _names(pool) == {"a", "b"}, 1.0, "events flow again")
        assert len(apiserver.list_requests()) == 1
