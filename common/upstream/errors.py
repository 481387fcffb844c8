"""What can go wrong talking to an upstream, classified by what it means for a retry.

The one question a forwarder asks of a failure is "could the upstream have started on this
request?" — `answered` is False when no byte of a response arrived, so another upstream may be
tried without risk of a duplicate answer reaching the client.
"""

from __future__ import annotations


class UpstreamError(Exception):
    """Base: `answered` tells whether any response byte had arrived; `kind` labels metrics."""

    kind = "error"

    def __init__(self, answered: bool, message: str) -> None:
        super().__init__(message)
        self.answered = answered


class ConnectFailed(UpstreamError):
    """Refused, unreachable or timed out while connecting: the upstream never saw the request."""

    kind = "connect"

    def __init__(self, message: str) -> None:
        super().__init__(False, message)


class PoolTimeout(UpstreamError):
    """No connection slot freed within the connect timeout (the per-upstream cap is reached)."""

    kind = "pool"

    def __init__(self, message: str) -> None:
        super().__init__(False, message)


class UpstreamClosed(UpstreamError):
    """The connection closed before the response was complete."""

    kind = "closed"


class UpstreamTimeout(UpstreamError):
    """No byte within the deadline. `phase` is "ack" (the server did not acknowledge the request:
    no interim 100 Continue nor a response head), "first_byte" (waiting for the response head or the
    first body chunk: nothing reached the client) or "idle" (a gap between chunks)."""

    kind = "timeout"

    def __init__(self, phase: str) -> None:
        what = "no acknowledgement" if phase == "ack" else phase.replace("_", " ")
        super().__init__(phase not in ("ack", "first_byte"), f"upstream timed out ({what})")
        self.phase = phase


class UpstreamProtocolError(UpstreamError):
    """The upstream sent something that is not valid HTTP/1.1."""

    kind = "protocol"

    def __init__(self, message: str) -> None:
        super().__init__(True, message)
