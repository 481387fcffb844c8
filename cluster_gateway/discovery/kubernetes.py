"""Pods from the Kubernetes API: an upstream InferencePool's selector and port, or our own selector.

Only pods that can take traffic enter the pool: Ready=True, with a pod IP, not being deleted.
Membership follows pod events as they arrive (list+watch via `cluster_gateway.k8s.reflector`).
With an InferencePool, the pool object itself is watched too, and a changed selector or target
port restarts the pod watch with the new values.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from kubernetes import client
from kubernetes.client.exceptions import ApiException

from cluster_gateway.k8s.client import load_api_client
from cluster_gateway.k8s.reflector import KubeObject, Reflector, WatchTimings, list_all
from cluster_gateway.pool import Endpoint, EndpointPool, EngineType
from common.config.gateway import (
    INFERENCE_POOL_GROUP,
    INFERENCE_POOL_PLURAL,
    INFERENCE_POOL_VERSION,
    KubernetesDiscovery,
)
from common.config.loader import ConfigError

log = logging.getLogger(__name__)

ENGINE_LABEL = "inference.networking.k8s.io/engine-type"
_ENGINES: Mapping[str, EngineType] = {"vllm": "vllm", "sglang": "sglang", "tgi": "tgi"}


@dataclass(frozen=True, slots=True)
class PodTarget:
    """Which pods to watch and which port they serve on."""

    match_labels: tuple[tuple[str, str], ...]
    port: int

    @classmethod
    def of(cls, match_labels: Mapping[str, str], port: int) -> PodTarget:
        return cls(tuple(sorted(match_labels.items())), port)

    @property
    def label_selector(self) -> str:
        return ",".join(f"{k}={v}" for k, v in self.match_labels)


def pod_is_serving(pod: KubeObject) -> bool:
    """Ready=True, has an IP, and not terminating (a deleted pod may still report Ready briefly)."""
    meta = pod.get("metadata") or {}
    status = pod.get("status") or {}
    if meta.get("deletionTimestamp") or not status.get("podIP"):
        return False
    return any(c.get("type") == "Ready" and c.get("status") == "True" for c in status.get("conditions") or [])


def endpoint_from_pod(pod: KubeObject, port: int) -> Endpoint | None:
    """The pool entry for a pod, or None while the pod must not receive traffic."""
    if not pod_is_serving(pod):
        return None
    meta = pod["metadata"]
    labels: dict[str, str] = dict(meta.get("labels") or {})
    engine = _ENGINES.get(labels.get(ENGINE_LABEL, "").lower())
    return Endpoint(
        name=meta["name"],
        address=pod["status"]["podIP"],
        port=port,
        engine=engine,
        labels=labels,
        annotations=dict(meta.get("annotations") or {}),
    )


def target_from_inference_pool(obj: KubeObject) -> PodTarget:
    """`spec.selector.matchLabels` + the first `spec.targetPorts[].number`; ValueError names the field."""
    spec = obj.get("spec") or {}
    match_labels = (spec.get("selector") or {}).get("matchLabels") or {}
    if not isinstance(match_labels, dict) or not match_labels:
        raise ValueError("spec.selector.matchLabels is empty")
    ports = spec.get("targetPorts") or []
    if not ports or not isinstance(ports[0], dict):
        raise ValueError("spec.targetPorts is empty")
    number = ports[0].get("number")
    if not isinstance(number, int) or not 1 <= number <= 65535:
        raise ValueError(f"spec.targetPorts[0].number is not a port: {number!r}")
    return PodTarget.of({str(k): str(v) for k, v in match_labels.items()}, number)


class _PodMembership:
    """Applies pod list/events to the pool, touching it only when a pod's entry really changes."""

    def __init__(self, pool: EndpointPool, port: int) -> None:
        self._pool = pool
        self._port = port
        self._members: dict[str, Endpoint] = {}

    def on_list(self, pods: list[KubeObject]) -> None:
        members = {ep.name: ep for ep in (endpoint_from_pod(p, self._port) for p in pods) if ep is not None}
        self._members = members
        self._pool.set_endpoints(members.values())
        log.info("kubernetes discovery: %d serving pods of %d listed", len(members), len(pods))

    def on_event(self, etype: str, pod: KubeObject) -> None:
        name = (pod.get("metadata") or {}).get("name")
        if not name:
            return
        ep = None if etype == "DELETED" else endpoint_from_pod(pod, self._port)
        if ep is None:
            if self._members.pop(name, None) is not None:
                self._pool.remove(name)
                log.info("kubernetes discovery: pod %s left the pool (%s)", name, etype.lower())
        elif self._members.get(name) != ep:
            is_new = name not in self._members
            self._members[name] = ep
            self._pool.upsert(ep)
            if is_new:
                log.info("kubernetes discovery: pod %s joined the pool at %s", name, ep.hostport)


class KubernetesSource:
    """Discovery from the Kubernetes API (in-cluster credentials or `kubeconfig`)."""

    def __init__(
        self,
        cfg: KubernetesDiscovery,
        api_client: client.ApiClient | None = None,
        *,
        timings: WatchTimings | None = None,
        list_page_size: int = 500,
    ) -> None:
        if cfg.inference_pool is None and (cfg.selector is None or not cfg.selector.match_labels):
            raise ConfigError(
                "discovery.kubernetes: set `inferencePool` or a non-empty `selector.matchLabels` "
                "(an empty selector would route to every pod in the namespace)"
            )
        self.cfg = cfg
        self._api = api_client or load_api_client(cfg.kubeconfig, field="discovery.kubernetes.kubeconfig")
        self._core = client.CoreV1Api(self._api)
        self._custom = client.CustomObjectsApi(self._api)
        self._timings = timings
        self.list_page_size = list_page_size
        self.target: PodTarget | None = None
        self._target_changed = asyncio.Event()
        self.pod_reflector: Reflector | None = None  # the current pod watch (tests inspect it)

    async def run(self, pool: EndpointPool) -> None:
        if self.cfg.inference_pool is None:
            assert self.cfg.selector is not None
            self.target = PodTarget.of(self.cfg.selector.match_labels, self.cfg.target_port)
            await self._watch_pods(pool, self.target)
            return
        pool_watch = asyncio.create_task(self._inference_pool_reflector(self.cfg.inference_pool).run())
        try:
            await self._follow_target(pool, pool_watch)
        finally:
            pool_watch.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await pool_watch

    # --- pods -----------------------------------------------------------
    async def _watch_pods(self, pool: EndpointPool, target: PodTarget) -> None:
        membership = _PodMembership(pool, target.port)
        ns, selector = self.cfg.namespace, target.label_selector

        def list_pods() -> tuple[list[KubeObject], str | None]:
            return list_all(
                self._core.list_namespaced_pod, ns, label_selector=selector, page_size=self.list_page_size
            )

        self.pod_reflector = Reflector(
            name=f"pods {ns}/{selector}",
            list_fn=list_pods,
            watch_call=self._core.list_namespaced_pod,
            watch_args=(ns,),
            watch_kwargs={"label_selector": selector},
            on_list=membership.on_list,
            on_event=membership.on_event,
            timings=self._timings,
        )
        log.info("kubernetes discovery: watching pods in %s with %s on port %d", ns, selector, target.port)
        await self.pod_reflector.run()

    async def _follow_target(self, pool: EndpointPool, pool_watch: asyncio.Task[Any]) -> None:
        """(Re)start the pod watch whenever the InferencePool's selector or port changes."""
        current: PodTarget | None = None
        pods: asyncio.Task[None] | None = None
        try:
            while True:
                changed = asyncio.create_task(self._target_changed.wait())
                waiting: set[asyncio.Task[Any]] = {changed, pool_watch}
                if pods is not None:
                    waiting.add(pods)
                done, _ = await asyncio.wait(waiting, return_when=asyncio.FIRST_COMPLETED)
                changed.cancel()
                for task in done - {changed}:
                    task.result()  # a watch loop only ends by a bug: surface it
                self._target_changed.clear()
                if self.target is None or self.target == current:
                    continue
                if pods is not None:
                    pods.cancel()
                    with contextlib.suppress(asyncio.CancelledError):
                        await pods
                current = self.target
                pods = asyncio.create_task(self._watch_pods(pool, current))
        finally:
            if pods is not None:
                pods.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await pods

    # --- the InferencePool object ----------------------------------------
    def _inference_pool_reflector(self, name: str) -> Reflector:
        ns = self.cfg.namespace
        ref = f"InferencePool {ns}/{name}"

        def get_pool() -> tuple[list[KubeObject], str | None]:
            try:
                obj = self._custom.get_namespaced_custom_object(
                    INFERENCE_POOL_GROUP,
                    INFERENCE_POOL_VERSION,
                    ns,
                    INFERENCE_POOL_PLURAL,
                    name,
                    _request_timeout=30,
                )
            except ApiException as exc:
                if exc.status == 404:
                    log.warning("kubernetes discovery: %s not found; waiting for it to be created", ref)
                    return [], None  # watch without a resourceVersion: it arrives as ADDED
                raise
            if not isinstance(obj, dict):
                raise TypeError(f"{ref}: unexpected response {type(obj).__name__}")
            return [obj], (obj.get("metadata") or {}).get("resourceVersion")

        def apply(obj: KubeObject) -> None:
            try:
                target = target_from_inference_pool(obj)
            except ValueError as exc:
                log.error("kubernetes discovery: %s is unusable (%s); keeping the previous pods", ref, exc)
                return
            if target != self.target:
                log.info(
                    "kubernetes discovery: %s selects %s on port %d", ref, target.label_selector, target.port
                )
                self.target = target
                self._target_changed.set()

        def on_list(objs: list[KubeObject]) -> None:
            for obj in objs:
                apply(obj)

        def on_event(etype: str, obj: KubeObject) -> None:
            if etype == "DELETED":
                log.warning("kubernetes discovery: %s was deleted; keeping the last known pods", ref)
            else:
                apply(obj)

        return Reflector(
            name=ref,
            list_fn=get_pool,
            watch_call=self._custom.list_namespaced_custom_object,
            watch_args=(INFERENCE_POOL_GROUP, INFERENCE_POOL_VERSION, ns, INFERENCE_POOL_PLURAL),
            watch_kwargs={"field_selector": f"metadata.name={name}"},
            on_list=on_list,
            on_event=on_event,
            timings=self._timings,
        )
