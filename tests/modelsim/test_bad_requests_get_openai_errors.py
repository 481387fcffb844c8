"""Malformed or impossible requests get OpenAI-shaped errors with the right status and param."""

from __future__ import annotations

import httpx
import pytest

from tests.modelsim.conftest import MODEL


def _err(r: httpx.Response) -> dict[str, object]:
    body = r.json()
    assert set(body) == {"error"}
    err = body["error"]
    assert set(err) == {"message", "type", "param", "code"}
    return err


@pytest.mark.parametrize(
    ("path", "payload", "status", "param"),
    [
        ("/v1/completions", {"prompt": "x"}, 400, "model"),
        ("/v1/completions", {"model": MODEL}, 400, "prompt"),
        ("/v1/chat/completions", {"model": MODEL, "messages": []}, 400, "messages"),
        ("/v1/completions", {"model": MODEL, "prompt": "x", "max_tokens": 0}, 400, "max_tokens"),
        ("/v1/completions", {"model": MODEL, "prompt": "x", "stream": "yes"}, 400, "stream"),
        ("/v1/completions", {"model": MODEL, "prompt": "x", "n": 2}, 400, "n"),
        ("/v1/completions", {"model": "gpt-nothing", "prompt": "x"}, 404, "model"),
        # tiny's context is 1024 tokens
        ("/v1/completions", {"model": MODEL, "prompt": "x" * 4000, "max_tokens": 200}, 400, "max_tokens"),
    ],
)
async def test_bad_request_gets_openai_error(
    client: httpx.AsyncClient, path: str, payload: dict[str, object], status: int, param: str
) -> None:
    r = await client.post(path, json=payload)
    assert r.status_code == status
    assert _err(r)["param"] == param


async def test_unknown_model_is_model_not_found(client: httpx.AsyncClient) -> None:
    r = await client.post(
        "/v1/chat/completions", json={"model": "x", "messages": [{"role": "user", "content": "a"}]}
    )
    assert r.status_code == 404
    assert _err(r)["code"] == "model_not_found"


async def test_invalid_json_and_unknown_path(client: httpx.AsyncClient) -> None:
    r = await client.post("/v1/completions", content=b"{not json")
    assert r.status_code == 400 and _err(r)["code"] == "invalid_json"
    r = await client.get("/v1/nothing")
    assert r.status_code == 404 and _err(r)["type"] == "not_found_error"
    r = await client.get("/v1/completions")
    assert r.status_code == 405


async def test_lora_load_unload_errors(client: httpx.AsyncClient) -> None:
    r = await client.post("/v1/load_lora_adapter", json={"lora_name": "sql", "lora_path": "/x"})
    assert r.status_code == 400 and _err(r)["param"] == "lora_name"
    r = await client.post("/v1/load_lora_adapter", json={"lora_name": "new"})
    assert r.status_code == 400 and _err(r)["param"] == "lora_path"
    r = await client.post("/v1/unload_lora_adapter", json={"lora_name": "ghost"})
    assert r.status_code == 404
    r = await client.post("/admin/faults", json={"mode": "explode"})
    assert r.status_code == 400 and _err(r)["param"] == "mode"
    r = await client.post("/admin/faults", json={"mode": "error", "rate": 3})
    assert r.status_code == 400 and _err(r)["param"] == "rate"
