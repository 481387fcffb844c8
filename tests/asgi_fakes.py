"""What the tests' stand-in ASGI servers (fake pods, gateways) share."""

from __future__ import annotations

from common.http import Receive


async def read_request_body(receive: Receive) -> bytes:
    """The whole request body, uncapped: a fake records what it was sent, it does not guard itself."""
    body = b""
    while True:
        msg = await receive()
        body += msg.get("body", b"")
        if not msg.get("more_body"):
            return body
