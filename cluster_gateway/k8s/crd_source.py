"""The gateway's config read from its `FleetgateGateway` custom resource instead of a file.

The CR's `spec` is exactly the config file's schema (`GatewaySpec`), validated the same way, so an
error names the resource and the field: "FleetgateGateway ns/name: field `scrape.intervalMs`: ...".
`watch` follows later edits (new `metadata.generation`) so the caller can apply or reject them.
"""

from __future__ import annotations

import asyncio
import inspect
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from kubernetes import client
from kubernetes.client.exceptions import ApiException
from tenacity import AsyncRetrying, retry_if_exception, stop_after_delay, wait_random_exponential

from cluster_gateway.k8s.client import current_namespace
from cluster_gateway.k8s.reflector import (
    KubeObject,
    Reflector,
    WatchTimings,
    describe_error,
    in_daemon_thread,
)
from common.config.gateway import CRD_GROUP, CRD_KIND, CRD_PLURAL, CRD_VERSION, GatewaySpec
from common.config.loader import ConfigError, load_config_data

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class GatewayResource:
    """One validated version of the CR: the spec to run and the generation it came from."""

    namespace: str
    name: str
    generation: int
    resource_version: str
    spec: GatewaySpec

    @property
    def ref(self) -> str:
        return f"{self.namespace}/{self.name}"


def resource_label(namespace: str, name: str) -> str:
    return f"{CRD_KIND} {namespace}/{name}"


def parse_resource_ref(ref: str, default_namespace: str | None = None) -> tuple[str, str]:
    """`namespace/name` or `name` (namespace: this pod's own, else `default`) → (namespace, name)."""
    text = ref.strip()
    namespace, sep, name = text.rpartition("/")
    if not sep:
        namespace = default_namespace or current_namespace()
    if not name or not namespace or "/" in namespace:
        raise ConfigError(f"{CRD_KIND} reference {ref!r}: expected NAMESPACE/NAME or NAME")
    return namespace, name


def gateway_resource(obj: KubeObject, namespace: str, name: str) -> GatewayResource:
    """Validate a CR object's spec; ConfigError names the resource and the field."""
    label = resource_label(namespace, name)
    if not isinstance(obj, dict):
        raise ConfigError(f"{label}: not an object")
    api_version = obj.get("apiVersion", f"{CRD_GROUP}/{CRD_VERSION}")
    if api_version != f"{CRD_GROUP}/{CRD_VERSION}" or obj.get("kind", CRD_KIND) != CRD_KIND:
        raise ConfigError(
            f"{label}: expected {CRD_GROUP}/{CRD_VERSION} {CRD_KIND}, got {api_version} {obj.get('kind')}"
        )
    if "spec" not in obj:
        raise ConfigError(f"{label}: field `spec`: missing")
    spec = load_config_data(obj["spec"], GatewaySpec, source=label)
    meta = obj.get("metadata") or {}
    return GatewayResource(
        namespace=namespace,
        name=name,
        generation=int(meta.get("generation") or 0),
        resource_version=str(meta.get("resourceVersion") or ""),
        spec=spec,
    )


def _transient(exc: BaseException) -> bool:
    if isinstance(exc, ApiException):
        return exc.status is None or exc.status == 0 or exc.status == 429 or exc.status >= 500
    return isinstance(exc, (OSError, ConnectionError)) or type(exc).__module__.startswith("urllib3")


OnChange = Callable[[GatewayResource], Awaitable[None] | None]
OnInvalid = Callable[[ConfigError], Awaitable[None] | None]


class CrdConfigSource:
    """Reads (and optionally follows) one FleetgateGateway object."""

    def __init__(
        self,
        api_client: client.ApiClient,
        namespace: str,
        name: str,
        *,
        startup_timeout_s: float = 30.0,
        timings: WatchTimings | None = None,
    ) -> None:
        self.namespace = namespace
        self.name = name
        self.label = resource_label(namespace, name)
        self._custom = client.CustomObjectsApi(api_client)
        self._startup_timeout_s = startup_timeout_s
        self._timings = timings or WatchTimings()
        self.current: GatewayResource | None = None

    def _get(self) -> Any:
        return self._custom.get_namespaced_custom_object(
            CRD_GROUP, CRD_VERSION, self.namespace, CRD_PLURAL, self.name, _request_timeout=30
        )

    async def load(self) -> GatewayResource:
        """GET and validate the CR; transient API errors are retried for `startup_timeout_s`."""
        obj: Any = None
        try:
            async for attempt in AsyncRetrying(
                wait=wait_random_exponential(
                    multiplier=self._timings.backoff_initial_s, max=self._timings.backoff_max_s
                ),
                stop=stop_after_delay(self._startup_timeout_s),
                retry=retry_if_exception(_transient),
                reraise=True,
            ):
                with attempt:
                    obj = await in_daemon_thread(self._get, f"get-{self.label}")
        except ApiException as exc:
            raise ConfigError(f"{self.label}: {self._explain(exc)}") from None
        except Exception as exc:
            raise ConfigError(f"{self.label}: cannot read it: {describe_error(exc)}") from None
        self.current = gateway_resource(obj, self.namespace, self.name)
        return self.current

    def _explain(self, exc: ApiException) -> str:
        if exc.status == 404:
            return "not found (is the CRD installed and the resource created?)"
        if exc.status in (401, 403):
            return (
                f"access denied (HTTP {exc.status}): the service account needs get/list/watch on {CRD_PLURAL}"
            )
        return f"cannot read it: {describe_error(exc)}"

    async def watch(self, on_change: OnChange, on_invalid: OnInvalid | None = None) -> None:
        """Until cancelled: call `on_change` for each new valid generation, `on_invalid` for a bad one.

        Status-only updates (same generation) are ignored, as is a deleted resource (the gateway keeps
        running on the last good spec).
        """
        queue: asyncio.Queue[KubeObject] = asyncio.Queue()

        def get_one() -> tuple[list[KubeObject], str | None]:
            try:
                obj = self._get()
            except ApiException as exc:
                if exc.status == 404:
                    return [], None
                raise
            return [obj], (obj.get("metadata") or {}).get("resourceVersion")

        def on_list(objs: list[KubeObject]) -> None:
            for obj in objs:
                queue.put_nowait(obj)

        def on_event(etype: str, obj: KubeObject) -> None:
            if etype == "DELETED":
                log.warning("%s was deleted; keeping the running config", self.label)
            else:
                queue.put_nowait(obj)

        reflector = Reflector(
            name=self.label,
            list_fn=get_one,
            watch_call=self._custom.list_namespaced_custom_object,
            watch_args=(CRD_GROUP, CRD_VERSION, self.namespace, CRD_PLURAL),
            watch_kwargs={"field_selector": f"metadata.name={self.name}"},
            on_list=on_list,
            on_event=on_event,
            timings=self._timings,
        )
        task = asyncio.create_task(reflector.run())
        seen_generation = self.current.generation if self.current else 0
        try:
            while True:
                getter = asyncio.ensure_future(queue.get())
                done, _ = await asyncio.wait({getter, task}, return_when=asyncio.FIRST_COMPLETED)
                if task in done:
                    getter.cancel()
                    task.result()
                obj = getter.result()
                generation = int((obj.get("metadata") or {}).get("generation") or 0)
                if generation <= seen_generation:
                    continue
                seen_generation = generation
                try:
                    resource = gateway_resource(obj, self.namespace, self.name)
                except ConfigError as exc:
                    log.error("rejected %s generation %d: %s", self.label, generation, exc)
                    if on_invalid is not None:
                        await _maybe_await(on_invalid(exc))
                    continue
                self.current = resource
                log.info("%s changed: generation %d", self.label, generation)
                await _maybe_await(on_change(resource))
        finally:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)


async def _maybe_await(result: Awaitable[None] | None) -> None:
    if inspect.isawaitable(result):
        await result
