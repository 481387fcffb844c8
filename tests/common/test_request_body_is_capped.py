"""Both tiers read bodies through common.asgi.read_body: oversized bodies are refused early, whole."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from common.asgi import ClientGone, read_body
from common.errors import OpenAIError


def _receiver(messages: list[dict[str, Any]]) -> Any:
    it = iter(messages)

    async def receive() -> dict[str, Any]:
        return next(it)

    return receive


def test_chunks_are_joined_in_order() -> None:
    msgs = [
        {"type": "http.request", "body": b"ab", "more_body": True},
        {"type": "http.request", "body": b"cd", "more_body": False},
    ]
    assert asyncio.run(read_body(_receiver(msgs), "4", 10)) == b"abcd"


def test_declared_length_over_the_cap_is_refused_before_reading() -> None:
    with pytest.raises(OpenAIError) as err:
        asyncio.run(read_body(_receiver([]), "11", 10))
    assert err.value.status == 413 and err.value.code == "request_too_large"


def test_undeclared_body_is_refused_once_it_passes_the_cap() -> None:
    msgs = [{"type": "http.request", "body": b"x" * 8, "more_body": True}] * 2
    with pytest.raises(OpenAIError) as err:
        asyncio.run(read_body(_receiver(msgs), None, 10))
    assert err.value.status == 413


def test_disconnect_mid_body_is_reported_as_client_gone() -> None:
    msgs = [{"type": "http.request", "body": b"ab", "more_body": True}, {"type": "http.disconnect"}]
    with pytest.raises(ClientGone):
        asyncio.run(read_body(_receiver(msgs), None, 10))
