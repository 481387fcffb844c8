"""With Envoy in front (real binary), the picker refuses a request without the router's signature
before any pod is picked, and Envoy relays the 401 OpenAI JSON; a signed request is served."""

from __future__ import annotations

import json
from pathlib import Path

from global_router.gateway_signer import GatewaySigner
from modelsim.fleet import PodSpec
from tests.cluster_gateway.extproc.test_envoy_end_to_end import chat, stack, until_released
from tests.cluster_gateway.integration.conftest import served_requests

SECRET = "envoy-mode-gateway-secret-0123456789"


async def test_envoy_relays_the_pickers_401_and_serves_signed_requests(tmp_path: Path) -> None:
    (tmp_path / "secret").write_text(SECRET + "\n")
    auth = {"mode": "hmac", "secretFile": str(tmp_path / "secret")}
    async with stack([PodSpec(profile="tiny")], tmp_path, auth=auth) as (fleet, gw, envoy):
        body = json.dumps(chat("hello")).encode()
        headers = {"content-type": "application/json"}
        r = await envoy.post("/v1/chat/completions", content=body, headers=headers)
        assert r.status_code == 401, r.text
        assert r.json()["error"]["code"] == "invalid_api_key"
        assert served_requests(fleet, 0) == 0  # refused before the pick: no pod saw it
        signed = GatewaySigner({"c": ("hmac", SECRET.encode())}).sign(
            "c", "POST", "/v1/chat/completions", body, headers
        )
        ok = await envoy.post("/v1/chat/completions", content=body, headers=signed)
        assert ok.status_code == 200, ok.text
        replay = await envoy.post("/v1/chat/completions", content=body, headers=signed)
        assert replay.status_code == 401
        await until_released(gw)
        assert served_requests(fleet, 0) == 1
