"""A client's departure, told to the request's work by the server that saw the connection close.

Both tiers cancel a request's upstream work the moment its client leaves (`asgi.run_until_disconnect`).
Through plain ASGI the only way to learn of a departure is a task blocked in `receive()` for the
whole request: one more task per request, woken once more when the response completes. Replacing
it with this hook took the embedded proxy from 0.243 to 0.229 ms of CPU per request at concurrency
64 (`python -m bench.row_cpu embedded`, 8 alternating pairs; bench/RESULTS.md). The server
(`http_server.guarded_protocol`) puts a `DisconnectHook` in each request's scope and fires it from
`connection_lost`, which is what uvicorn's `receive()` would have reported; without the extension
(another server, a test client) the watcher task is still used.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

DISCONNECT_HOOK = "fleetgate.disconnect"  # scope["extensions"][DISCONNECT_HOOK] is the DisconnectHook


class DisconnectHook:
    """Fires once, when the connection of a request whose response is not complete is lost.

    A callback set after the hook fired runs at once: a client that left before the work began
    is told as one that leaves during it."""

    __slots__ = ("_callback", "fired")

    def __init__(self) -> None:
        self._callback: Callable[[], None] | None = None
        self.fired = False

    def watch(self, callback: Callable[[], None]) -> None:
        if self.fired:
            callback()
        else:
            self._callback = callback

    def unwatch(self) -> None:
        """Forget the callback (the work ended): it holds the request's task."""
        self._callback = None

    def fire(self) -> None:
        if self.fired:
            return
        self.fired = True
        callback, self._callback = self._callback, None
        if callback is not None:
            callback()


def disconnect_hook(scope: Mapping[str, Any]) -> DisconnectHook | None:
    """The request's hook, when the server that runs it provides one."""
    ext = scope.get("extensions")
    hook = ext.get(DISCONNECT_HOOK) if ext else None
    return hook if isinstance(hook, DisconnectHook) else None
