"""Resumable list+watch of one Kubernetes collection, bridged from the sync client to asyncio.

The official client is synchronous: each watch connection runs in a daemon thread that feeds an
asyncio queue, so the event loop never blocks and a stuck socket can never hold up shutdown.
Semantics follow client-go's reflector: list (full state + resourceVersion), then watch from that
resourceVersion; a dropped connection resumes from the last resourceVersion seen (events and
bookmarks); 410 Gone means the history is compacted and a fresh list is needed; API errors back off
exponentially with jitter. Handlers run on the event loop, in order.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import random
import socket
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, NoReturn, TypeVar

from kubernetes import watch
from kubernetes.client.exceptions import ApiException
from tenacity import AsyncRetrying, RetryCallState, retry_if_exception, wait_random_exponential

log = logging.getLogger(__name__)

T = TypeVar("T")

KubeObject = dict[str, Any]
# A blocking call returning the collection's current items and the resourceVersion to watch from.
ListFn = Callable[[], tuple[list[KubeObject], str | None]]


@dataclass(frozen=True, slots=True)
class WatchTimings:
    """Knobs for how long watches live and how hard to back off; tests shrink them."""

    min_watch_s: float = 300.0  # each watch asks the server to end it after [min, 2*min) seconds
    connect_timeout_s: float = 10.0
    read_slack_s: float = 30.0  # a silent socket is abandoned this long after the server's own timeout
    backoff_initial_s: float = 0.2
    backoff_max_s: float = 30.0
    early_end_s: float = 1.0  # a watch that ends this fast with nothing in it counts as a failure


class _Stopped(Exception):
    """The session ended before its watch request was sent."""


def _shutdown_socket(resp: Any) -> None:
    """Unblock a thread reading this response (close() alone would wait for the reader)."""
    sock = getattr(getattr(resp, "connection", None), "sock", None)
    if sock is not None:
        with contextlib.suppress(OSError):
            sock.shutdown(socket.SHUT_RDWR)


class _WatchEndedEarly(Exception):
    """The server closed a watch immediately without events: retry with backoff, don't spin."""


async def in_daemon_thread(fn: Callable[[], T], name: str = "k8s-call") -> T:
    """Like `asyncio.to_thread`, but a hung API call can never hold up loop or process shutdown."""
    loop = asyncio.get_running_loop()
    future: asyncio.Future[T] = loop.create_future()

    def settle(result: Any, exc: BaseException | None) -> None:
        if future.done():  # the awaiting task was cancelled
            return
        if exc is not None:
            future.set_exception(exc)
        else:
            future.set_result(result)

    def work() -> None:
        result: Any = None
        error: BaseException | None = None
        try:
            result = fn()
        except BaseException as exc:
            error = exc
        with contextlib.suppress(RuntimeError):  # the loop is closed: nobody is waiting
            loop.call_soon_threadsafe(settle, result, error)

    threading.Thread(target=work, name=name, daemon=True).start()
    return await future


def is_gone(exc: BaseException) -> bool:
    return isinstance(exc, ApiException) and exc.status == 410


def _retryable(exc: BaseException) -> bool:
    return isinstance(exc, Exception) and not is_gone(exc)


def _retryable_or_gone(exc: BaseException) -> bool:
    return isinstance(exc, Exception)


def list_all(
    call: Callable[..., Any], *args: Any, page_size: int = 500, **kwargs: Any
) -> tuple[list[KubeObject], str | None]:
    """A consistent list in pages of `page_size` (one snapshot, like client-go's pager): the items and
    the list's resourceVersion. Items stay plain dicts: decoding thousands of pods into client models
    is slow and we read only a few fields."""
    items: list[KubeObject] = []
    token: str | None = None
    while True:
        page: dict[str, Any] = {"limit": page_size}
        if token:
            page["_continue"] = token
        resp = call(*args, **kwargs, **page, _preload_content=False, _request_timeout=30)
        body = json.loads(resp.data)
        meta = body.get("metadata") or {}
        items.extend(body.get("items") or [])
        token = meta.get("continue")
        if not token:
            return items, meta.get("resourceVersion")


def describe_error(exc: BaseException) -> str:
    if isinstance(exc, ApiException):
        return f"HTTP {exc.status} {exc.reason or ''}".strip()
    return f"{type(exc).__name__}: {exc}"


class Reflector:
    """Keeps a consumer in step with one collection: `on_list` with the full state, then `on_event`."""

    def __init__(
        self,
        *,
        name: str,
        list_fn: ListFn,
        watch_call: Callable[..., Any],
        watch_args: tuple[Any, ...],
        watch_kwargs: dict[str, Any],
        on_list: Callable[[list[KubeObject]], None],
        on_event: Callable[[str, KubeObject], None],
        timings: WatchTimings | None = None,
    ) -> None:
        self.name = name
        self._list_fn = list_fn
        self._watch_call = watch_call
        self._watch_args = watch_args
        self._watch_kwargs = watch_kwargs
        self._on_list = on_list
        self._on_event = on_event
        self._t = timings or WatchTimings()
        self.resource_version: str | None = None
        self.relists = 0  # how many times the full state was (re)read
        self._events_since_list = 0

    async def run(self) -> NoReturn:
        gone_streak = 0  # 410s right after a relist, with nothing in between: back off, don't spin
        while True:
            await self._relist()
            try:
                while True:
                    async for attempt in self._retrying("watch"):
                        with attempt:
                            await self._watch_session()
            except ApiException as exc:
                if not is_gone(exc):
                    raise
                gone_streak = 0 if self._events_since_list else gone_streak + 1
                delay = self._gone_backoff(gone_streak)
                log.info(
                    "%s: resourceVersion %s expired (410 Gone), relisting in %.2fs",
                    self.name,
                    self.resource_version,
                    delay,
                )
                await asyncio.sleep(delay)

    def _gone_backoff(self, streak: int) -> float:
        """No wait for a lone 410 (normal after a long disconnect); jittered exponential after that."""
        if streak <= 1:
            return 0.0
        ceiling = min(self._t.backoff_max_s, self._t.backoff_initial_s * 2 ** (streak - 1))
        return random.uniform(ceiling / 2, ceiling)

    def _retrying(self, what: str, retry_gone: bool = False) -> AsyncRetrying:
        def before_sleep(state: RetryCallState) -> None:
            exc = state.outcome.exception() if state.outcome else None
            sleep = state.next_action.sleep if state.next_action else 0.0
            log.warning(
                "%s: %s failed (%s), attempt %d, retrying in %.2fs",
                self.name,
                what,
                describe_error(exc) if exc else "?",
                state.attempt_number,
                sleep,
            )

        return AsyncRetrying(
            wait=wait_random_exponential(multiplier=self._t.backoff_initial_s, max=self._t.backoff_max_s),
            retry=retry_if_exception(_retryable_or_gone if retry_gone else _retryable),
            before_sleep=before_sleep,
            reraise=True,
        )

    async def _relist(self) -> None:
        async for attempt in self._retrying("list", retry_gone=True):
            with attempt:
                items, rv = await in_daemon_thread(self._list_fn, f"list-{self.name}")
        self.relists += 1
        self.resource_version = rv
        self._events_since_list = 0
        self._on_list(items)

    def _watch_kwargs_now(self) -> dict[str, Any]:
        timeout = int(self._t.min_watch_s * (1 + random.random())) or 1
        kwargs = dict(self._watch_kwargs)
        kwargs.update(
            timeout_seconds=timeout,  # also makes Watch.stream leave resumption and 410s to us
            allow_watch_bookmarks=True,
            _request_timeout=(self._t.connect_timeout_s, timeout + self._t.read_slack_s),
        )
        if self.resource_version:
            kwargs["resource_version"] = self.resource_version
        return kwargs

    async def _watch_session(self) -> None:
        """One watch connection, from the current resourceVersion until it ends."""
        loop = asyncio.get_running_loop()
        queue: asyncio.Queue[tuple[str, Any]] = asyncio.Queue()
        stopping = threading.Event()
        w = watch.Watch(return_type="object")  # events stay plain dicts (fast, no model validation)
        kwargs = self._watch_kwargs_now()

        def post(item: tuple[str, Any]) -> None:
            if not stopping.is_set():
                with contextlib.suppress(RuntimeError):  # the loop is gone: nobody is listening
                    loop.call_soon_threadsafe(queue.put_nowait, item)

        responses: list[Any] = []

        def call(*args: Any, **kw: Any) -> Any:
            # Watch.stop() only sees the response once the stream loop has it; recording it here
            # closes the gap between "request sent" and "stream loop started".
            if stopping.is_set():
                raise _Stopped
            resp = self._watch_call(*args, **kw)
            responses.append(resp)
            if stopping.is_set():
                _shutdown_socket(resp)
            return resp

        def pump() -> None:
            outcome: tuple[str, Any] = ("end", None)
            try:
                for event in w.stream(call, *self._watch_args, **kwargs):
                    post(("event", event))
                    if stopping.is_set():
                        break
            except _Stopped:
                pass
            except BaseException as exc:
                outcome = ("error", exc)
            post(outcome)

        threading.Thread(target=pump, name=f"watch-{self.name}", daemon=True).start()
        started = loop.time()
        progressed = False
        try:
            while True:
                kind, payload = await queue.get()
                if kind == "event":
                    self._apply(payload)
                    progressed = True
                elif kind == "error":
                    if progressed and not is_gone(payload):
                        # Resume right away from the last resourceVersion; back off only on no progress.
                        log.info(
                            "%s: watch broke (%s), resuming from %s",
                            self.name,
                            describe_error(payload),
                            self.resource_version,
                        )
                        return
                    raise payload
                else:
                    if not progressed and loop.time() - started < self._t.early_end_s:
                        raise _WatchEndedEarly("watch closed by the server at once")
                    return
        finally:
            stopping.set()
            w.stop()  # shuts the socket down so the pump thread unblocks at once
            for resp in responses:
                _shutdown_socket(resp)

    def _apply(self, event: dict[str, Any]) -> None:
        etype = event.get("type", "")
        obj = event.get("raw_object") or event.get("object") or {}
        rv = (obj.get("metadata") or {}).get("resourceVersion") if isinstance(obj, dict) else None
        if rv:
            self.resource_version = rv
        self._events_since_list += 1
        if etype in ("ADDED", "MODIFIED", "DELETED") and isinstance(obj, dict):
            self._on_event(etype, obj)
