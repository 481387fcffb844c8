"""A small kube-apiserver emulation on 127.0.0.1 for driving the real `kubernetes` client in tests.

It serves only what Fleetgate uses: pod list/watch in a namespace (label selectors), namespaced
custom objects (get, list/watch with a `metadata.name` field selector, merge-patch of `status`),
resourceVersions, BOOKMARK events, expiry (410 Gone) of old resourceVersions, and dropped watches.
Every request is recorded so tests can assert what the client asked for.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
import urllib.parse
from dataclasses import dataclass, field
from typing import Any

import uvicorn

from common.http import Receive, Scope, Send, send_json
from tests.asgi_fakes import read_request_body

PODS = "v1/pods"
_DROP_CLEAN = object()
_DROP_ABRUPT = object()


class _AbortConnection(Exception):
    """Raised inside a watch response to cut the connection without a terminating chunk."""


@dataclass
class RecordedRequest:
    method: str
    path: str
    query: dict[str, str]
    body: Any = None
    content_type: str = ""
    headers: dict[str, str] = field(default_factory=dict)
    at: float = field(default_factory=time.monotonic)


@dataclass(eq=False)
class _Watcher:
    collection: str
    namespace: str
    label_selector: dict[str, str]
    field_name: str | None
    queue: asyncio.Queue[Any] = field(default_factory=asyncio.Queue)


def make_pod(
    name: str,
    ip: str | None = "10.0.0.1",
    *,
    ready: bool = True,
    labels: dict[str, str] | None = None,
    namespace: str = "default",
    deleting: bool = False,
    phase: str = "Running",
) -> dict[str, Any]:
    """A Pod object shaped like the API server returns it (only the fields that matter here)."""
    pod: dict[str, Any] = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "namespace": namespace,
            "labels": dict(labels or {}),
            "uid": f"uid-{name}",
        },
        "spec": {"containers": [{"name": "server", "image": "vllm/vllm-openai"}]},
        "status": {
            "phase": phase,
            "conditions": [
                {"type": "PodScheduled", "status": "True"},
                {"type": "Ready", "status": "True" if ready else "False"},
            ],
        },
    }
    if ip is not None:
        pod["status"]["podIP"] = ip
    if deleting:
        pod["metadata"]["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    return pod


def custom_collection(group: str, version: str, plural: str) -> str:
    return f"{group}/{version}/{plural}"


def _parse_selector(raw: str | None) -> dict[str, str]:
    out: dict[str, str] = {}
    for part in (raw or "").split(","):
        if not part:
            continue
        key, _, value = part.replace("==", "=").partition("=")
        out[key] = value
    return out


def _merge_patch(target: Any, patch: Any) -> Any:
    """RFC 7386 JSON merge patch."""
    if not isinstance(patch, dict):
        return patch
    result = dict(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            result.pop(key, None)
        else:
            result[key] = _merge_patch(result.get(key), value)
    return result


def _status(code: int, reason: str, message: str) -> dict[str, Any]:
    return {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": message,
        "reason": reason,
        "code": code,
    }


class FakeApiServer:
    """Holds objects, a change log for watch replay, and the live watch connections."""

    def __init__(self) -> None:
        self.rv = 100
        self.compacted_rv = 0  # watches from a resourceVersion below this get 410 Gone
        self.objects: dict[tuple[str, str, str], dict[str, Any]] = {}
        self.log: list[tuple[int, str, str, dict[str, Any]]] = []  # rv, collection, type, object
        self.requests: list[RecordedRequest] = []
        self.fail_next: list[int] = []  # HTTP codes for the next requests (any path)
        self.expire_next_continue = 0  # the next N continue tokens are answered with 410
        self.hang_next = 0  # the next N requests get no answer until the server stops
        self._release = asyncio.Event()
        self._watchers: set[_Watcher] = set()
        self._snapshots: dict[str, tuple[int, list[dict[str, Any]]]] = {}  # paginated lists
        self._server: uvicorn.Server | None = None
        self._task: asyncio.Task[None] | None = None
        self.port = 0

    # --- lifecycle ------------------------------------------------------
    async def start(self) -> int:
        config = uvicorn.Config(self, host="127.0.0.1", port=0, log_level="critical", lifespan="off")
        self._server = uvicorn.Server(config)
        self._task = asyncio.create_task(self._server.serve())
        while not self._server.started:
            if self._task.done():
                self._task.result()
            await asyncio.sleep(0.01)
        self.port = int(self._server.servers[0].sockets[0].getsockname()[1])
        return self.port

    async def stop(self) -> None:
        self._release.set()
        self.drop_watches(abrupt=False)
        if self._server is not None and self._task is not None:
            self._server.should_exit = True
            self._server.force_exit = True
            with contextlib.suppress(asyncio.TimeoutError, asyncio.CancelledError):
                await asyncio.wait_for(self._task, 5)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    # --- state changes (what a controller or kubelet would do) ----------
    def put(self, collection: str, obj: dict[str, Any]) -> dict[str, Any]:
        meta = obj.setdefault("metadata", {})
        ns = meta.setdefault("namespace", "default")
        key = (collection, ns, meta["name"])
        old = self.objects.get(key)
        self.rv += 1
        meta["resourceVersion"] = str(self.rv)
        if old is None:
            meta.setdefault("generation", 1)
        else:
            meta["generation"] = old["metadata"].get("generation", 1) + (
                1 if old.get("spec") != obj.get("spec") else 0
            )
        stored = json.loads(json.dumps(obj))
        self.objects[key] = stored
        self._emit(collection, "ADDED" if old is None else "MODIFIED", stored)
        return stored

    def put_pod(self, pod: dict[str, Any]) -> dict[str, Any]:
        return self.put(PODS, pod)

    def delete(self, collection: str, name: str, namespace: str = "default") -> None:
        obj = self.objects.pop((collection, namespace, name))
        self.rv += 1
        obj["metadata"]["resourceVersion"] = str(self.rv)
        self._emit(collection, "DELETED", obj)

    def delete_pod(self, name: str, namespace: str = "default") -> None:
        self.delete(PODS, name, namespace)

    def get(self, collection: str, name: str, namespace: str = "default") -> dict[str, Any] | None:
        return self.objects.get((collection, namespace, name))

    def compact(self) -> None:
        """Forget history: every resourceVersion before the current one becomes too old to watch from."""
        self.compacted_rv = self.rv
        self.log.clear()

    def bookmark(self) -> None:
        """Send a BOOKMARK carrying the current resourceVersion to every open watch."""
        self.rv += 1
        for w in self._watchers:
            w.queue.put_nowait(("BOOKMARK", {"kind": "", "metadata": {"resourceVersion": str(self.rv)}}))

    def watch_error(self, code: int, reason: str = "InternalError") -> int:
        """Send an ERROR event (a Status with `code`) on every open watch, then end it."""
        for w in self._watchers:
            w.queue.put_nowait(("ERROR", _status(code, reason, f"injected watch error {code}")))
            w.queue.put_nowait(_DROP_CLEAN)
        return len(self._watchers)

    def drop_watches(self, *, abrupt: bool = True) -> int:
        """End every open watch: abruptly (connection cut mid-stream) or cleanly (server timeout)."""
        for w in self._watchers:
            w.queue.put_nowait(_DROP_ABRUPT if abrupt else _DROP_CLEAN)
        return len(self._watchers)

    @property
    def open_watches(self) -> int:
        return len(self._watchers)

    def watch_requests(self, path_suffix: str = "/pods") -> list[RecordedRequest]:
        return [r for r in self.requests if r.query.get("watch") == "true" and r.path.endswith(path_suffix)]

    def list_requests(self, path_suffix: str = "/pods") -> list[RecordedRequest]:
        return [r for r in self.requests if r.query.get("watch") != "true" and r.path.endswith(path_suffix)]

    def _emit(self, collection: str, etype: str, obj: dict[str, Any]) -> None:
        snapshot = json.loads(json.dumps(obj))
        self.log.append((self.rv, collection, etype, snapshot))
        for w in self._watchers:
            if self._matches(w.collection, w.namespace, w.label_selector, w.field_name, collection, snapshot):
                w.queue.put_nowait((etype, snapshot))

    @staticmethod
    def _matches(
        want_coll: str,
        want_ns: str,
        selector: dict[str, str],
        field_name: str | None,
        collection: str,
        obj: dict[str, Any],
    ) -> bool:
        meta = obj.get("metadata", {})
        if collection != want_coll or meta.get("namespace") != want_ns:
            return False
        if field_name is not None and meta.get("name") != field_name:
            return False
        labels = meta.get("labels") or {}
        return all(labels.get(k) == v for k, v in selector.items())

    # --- ASGI -----------------------------------------------------------
    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            return
        method = scope["method"]
        path = scope["path"]
        query = {k: v[-1] for k, v in urllib.parse.parse_qs(scope["query_string"].decode()).items()}
        body_bytes = await read_request_body(receive)
        headers = {k.decode().lower(): v.decode() for k, v in scope["headers"]}
        body = json.loads(body_bytes) if body_bytes else None
        self.requests.append(
            RecordedRequest(method, path, query, body, headers.get("content-type", ""), headers)
        )
        if self.hang_next > 0:
            self.hang_next -= 1
            await self._release.wait()
            await self._json(send, 503, _status(503, "ServiceUnavailable", "server stopping"))
            return
        if self.fail_next:
            code = self.fail_next.pop(0)
            await self._json(send, code, _status(code, "InternalError", f"injected failure {code}"))
            return
        route = self._route(path)
        if route is None:
            await self._json(send, 404, _status(404, "NotFound", f"no route for {path}"))
            return
        collection, namespace, name, sub = route
        if method == "GET" and name is None:
            if query.get("watch") == "true":
                await self._watch(receive, send, collection, namespace, query)
            else:
                await self._list(send, collection, namespace, query)
        elif method == "GET" and sub is None:
            assert name is not None
            obj = self.get(collection, name, namespace)
            if obj is None:
                await self._json(send, 404, _status(404, "NotFound", f'"{name}" not found'))
            else:
                await self._json(send, 200, obj)
        elif method == "PATCH" and name is not None and sub == "status":
            await self._patch_status(send, collection, namespace, name, body, headers.get("content-type", ""))
        else:
            await self._json(send, 405, _status(405, "MethodNotAllowed", f"{method} {path}"))

    @staticmethod
    def _route(path: str) -> tuple[str, str, str | None, str | None] | None:
        parts = [p for p in path.split("/") if p]
        # /api/v1/namespaces/{ns}/pods[/{name}]
        if parts[:3] == ["api", "v1", "namespaces"] and len(parts) >= 5 and parts[4] == "pods":
            return PODS, parts[3], parts[5] if len(parts) > 5 else None, None
        # /apis/{group}/{version}/namespaces/{ns}/{plural}[/{name}[/status]]
        if len(parts) >= 6 and parts[0] == "apis" and parts[3] == "namespaces":
            coll = custom_collection(parts[1], parts[2], parts[5])
            name = parts[6] if len(parts) > 6 else None
            sub = parts[7] if len(parts) > 7 else None
            return coll, parts[4], name, sub
        return None

    async def _json(self, send: Send, code: int, payload: Any) -> None:
        await send_json(send, code, json.dumps(payload).encode())

    async def _list(self, send: Send, collection: str, namespace: str, query: dict[str, str]) -> None:
        token = query.get("continue")
        if token:  # a later page of a paginated list: served from the first page's snapshot
            snap_id, _, offset_s = token.partition(":")
            snapshot = self._snapshots.get(snap_id)
            expire = self.expire_next_continue > 0
            self.expire_next_continue -= 1 if expire else 0
            if snapshot is None or snapshot[0] < self.compacted_rv or expire:
                await self._json(send, 410, _status(410, "Expired", "the continue token has expired"))
                return
            list_rv, items, offset = snapshot[0], snapshot[1], int(offset_s)
        else:
            selector = _parse_selector(query.get("labelSelector"))
            field_name = _parse_selector(query.get("fieldSelector")).get("metadata.name")
            items = [
                o
                for (coll, _, _), o in sorted(self.objects.items())
                if self._matches(collection, namespace, selector, field_name, coll, o)
            ]
            list_rv, offset = self.rv, 0
        meta: dict[str, Any] = {"resourceVersion": str(list_rv)}
        limit = int(query.get("limit") or 0)
        page = items[offset:]
        if limit and len(page) > limit:
            page = page[:limit]
            snap_id = token.partition(":")[0] if token else str(len(self._snapshots))
            self._snapshots[snap_id] = (list_rv, items)
            meta["continue"] = f"{snap_id}:{offset + limit}"
            meta["remainingItemCount"] = len(items) - offset - limit
        kind = "PodList" if collection == PODS else "List"
        await self._json(send, 200, {"kind": kind, "apiVersion": "v1", "metadata": meta, "items": page})

    async def _watch(
        self, receive: Receive, send: Send, collection: str, namespace: str, query: dict[str, str]
    ) -> None:
        await send(
            {
                "type": "http.response.start",
                "status": 200,
                "headers": [(b"content-type", b"application/json")],
            }
        )

        async def event(etype: str, obj: dict[str, Any]) -> None:
            line = json.dumps({"type": etype, "object": obj}).encode() + b"\n"
            await send({"type": "http.response.body", "body": line, "more_body": True})

        since = int(query.get("resourceVersion") or 0)
        if since and since < self.compacted_rv:
            await event("ERROR", _status(410, "Expired", f"too old resource version: {since} ({self.rv})"))
            await send({"type": "http.response.body", "body": b""})
            return
        w = _Watcher(
            collection,
            namespace,
            _parse_selector(query.get("labelSelector")),
            _parse_selector(query.get("fieldSelector")).get("metadata.name"),
        )
        # Register and replay in one synchronous step so no change can fall between them.
        backlog = [
            (etype, obj)
            for rv, coll, etype, obj in self.log
            if rv > since
            and self._matches(w.collection, namespace, w.label_selector, w.field_name, coll, obj)
        ]
        self._watchers.add(w)
        disconnected = asyncio.ensure_future(receive())  # only `http.disconnect` can arrive now
        deadline = time.monotonic() + float(query.get("timeoutSeconds") or 3600)
        try:
            for etype, obj in backlog:
                await event(etype, obj)
            while True:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    break
                getter = asyncio.ensure_future(w.queue.get())
                done, _ = await asyncio.wait(
                    {getter, disconnected}, timeout=remaining, return_when="FIRST_COMPLETED"
                )
                if getter not in done:
                    getter.cancel()
                    break  # the server's timeout, or the client went away
                item = getter.result()
                if item is _DROP_CLEAN:
                    break
                if item is _DROP_ABRUPT:
                    raise _AbortConnection("watch dropped by test")
                etype, obj = item
                if etype == "BOOKMARK" and query.get("allowWatchBookmarks") != "true":
                    continue
                await event(etype, obj)
        finally:
            self._watchers.discard(w)
            disconnected.cancel()
        if disconnected.done() and not disconnected.cancelled():
            return
        await send({"type": "http.response.body", "body": b""})

    async def _patch_status(
        self, send: Send, collection: str, namespace: str, name: str, body: Any, content_type: str
    ) -> None:
        obj = self.get(collection, name, namespace)
        if obj is None:
            await self._json(send, 404, _status(404, "NotFound", f'"{name}" not found'))
            return
        if "merge-patch" not in content_type or not isinstance(body, dict):
            await self._json(send, 415, _status(415, "UnsupportedMediaType", content_type))
            return
        updated = _merge_patch(obj, {"status": body.get("status")})
        updated["metadata"] = obj["metadata"]  # status patches never touch metadata/spec
        updated["spec"] = obj.get("spec")
        self.rv += 1
        updated["metadata"]["resourceVersion"] = str(self.rv)
        self.objects[(collection, namespace, name)] = updated
        self._emit(collection, "MODIFIED", updated)
        await self._json(send, 200, updated)
