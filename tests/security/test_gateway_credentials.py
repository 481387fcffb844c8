"""The router's per-cluster credential: signed by `GatewaySigner`, checked by the gateway's verifier."""

from __future__ import annotations

from pathlib import Path

import pytest

from cluster_gateway.auth.replay import ReplayCache
from cluster_gateway.auth.verifier import GatewayAuthenticator, build_authenticator
from common.config import ConfigError, load_config_data
from common.config.gateway import GatewayAuth, GatewaySpec
from common.config.router import GlobalRouterConfig
from common.errors import OpenAIError
from common.gateway_auth import NONCE_HEADER, SIGNATURE_HEADER, TIMESTAMP_HEADER, TOKEN_HEADER
from global_router.gateway_signer import GatewaySigner
from global_router.tenants import hash_key

SECRET = b"s3cret-for-cluster-a-0123456789"
OLD_SECRET = b"old-secret-for-cluster-a-98765"
PATH = "/v1/chat/completions"
BODY = b'{"model":"m","messages":[{"role":"user","content":"hi"}]}'


class Clock:
    def __init__(self, t: float = 1_700_000_000.0) -> None:
        self.t = t

    def __call__(self) -> float:
        return self.t


def hmac_auth(clock: Clock, secrets: list[bytes] | None = None, **kw: object) -> GatewayAuthenticator:
    cfg = GatewayAuth(mode="hmac", secret_env="UNUSED", **kw)  # type: ignore[arg-type]
    return GatewayAuthenticator(cfg, secrets=secrets or [SECRET], clock=clock)


def signed(clock: Clock, secret: bytes = SECRET, body: bytes = BODY, path: str = PATH) -> dict[str, str]:
    signer = GatewaySigner({"a": ("hmac", secret)}, clock=clock)
    return signer.sign("a", "POST", path, body, {"content-type": "application/json"})


def refused(auth: GatewayAuthenticator, headers: dict[str, str], body: bytes = BODY, path: str = PATH) -> str:
    with pytest.raises(OpenAIError) as err:
        auth.verify("POST", path, headers, body)
    assert err.value.status == 401
    body_doc = err.value.body()["error"]
    assert body_doc["type"] == "authentication_error" and body_doc["code"] == "invalid_api_key"
    return err.value.message


def test_a_router_signature_is_accepted_once() -> None:
    clock = Clock()
    auth = hmac_auth(clock)
    headers = signed(clock)
    assert set(headers) >= {TIMESTAMP_HEADER, NONCE_HEADER, SIGNATURE_HEADER}
    auth.verify("POST", PATH, headers, BODY)
    assert "replay" in refused(auth, headers)  # the same signed request again


def test_no_credential_is_refused_with_an_openai_401() -> None:
    assert "global router" in refused(hmac_auth(Clock()), {"content-type": "application/json"})


@pytest.mark.parametrize(
    ("tamper", "why"),
    [
        (lambda h: {**h, SIGNATURE_HEADER: "v1=" + "0" * 64}, "Invalid"),
        (lambda h: {**h, NONCE_HEADER: "another-nonce"}, "Invalid"),
        (lambda h: {**h, TIMESTAMP_HEADER: str(int(h[TIMESTAMP_HEADER]) + 1)}, "Invalid"),
        (lambda h: {**h, TIMESTAMP_HEADER: "soon"}, "Malformed"),
        (lambda h: {k: v for k, v in h.items() if k != NONCE_HEADER}, "Malformed"),
    ],
)
def test_a_forged_or_altered_signature_is_refused(tamper: object, why: str) -> None:
    clock = Clock()
    auth = hmac_auth(clock)
    assert why in refused(auth, tamper(signed(clock)))  # type: ignore[operator]


def test_a_signature_over_another_body_or_path_or_with_another_secret_is_refused() -> None:
    clock = Clock()
    auth = hmac_auth(clock)
    assert "Invalid" in refused(auth, signed(clock), body=BODY.replace(b"hi", b"steal"))
    assert "Invalid" in refused(auth, signed(clock), path="/v1/completions")
    assert "Invalid" in refused(auth, signed(clock, secret=b"not-this-clusters-secret-xx"))


def test_old_and_future_signatures_fall_outside_the_replay_window() -> None:
    clock = Clock()
    auth = hmac_auth(clock, max_skew_s=30)
    old = signed(clock)
    clock.t += 31
    assert "expired" in refused(auth, old)
    future = signed(Clock(clock.t + 31))
    assert "expired" in refused(auth, future)
    auth.verify("POST", PATH, signed(Clock(clock.t + 29)), BODY)  # within the skew: fine


def test_rotation_accepts_both_secrets_while_the_router_moves_to_the_new_one() -> None:
    clock = Clock()
    auth = hmac_auth(clock, secrets=[SECRET, OLD_SECRET])
    auth.verify("POST", PATH, signed(clock, secret=OLD_SECRET), BODY)
    auth.verify("POST", PATH, signed(clock, secret=SECRET), BODY)


def test_bearer_mode_keeps_only_the_digest() -> None:
    token = "router-bearer-token-for-a-0123"
    cfg = GatewayAuth(mode="bearer", token_sha256=[hash_key(token)])
    auth = GatewayAuthenticator(cfg)
    signer = GatewaySigner({"a": ("bearer", token.encode())})
    auth.verify("POST", PATH, signer.sign("a", "POST", PATH, BODY, {}), BODY)
    assert "not valid" in refused(auth, {TOKEN_HEADER: token + "x"})
    assert token not in repr(vars(auth))  # the gateway never holds the token itself


def test_local_api_keys_use_the_routers_digest_format() -> None:
    cfg = GatewayAuth(api_key_sha256=[hash_key("sk-local")])
    auth = GatewayAuthenticator(cfg)
    assert auth.required
    auth.verify("POST", PATH, {"authorization": "Bearer sk-local"}, BODY)
    assert "Incorrect API key" in refused(auth, {"authorization": "Bearer sk-other"})
    assert "global router" in refused(auth, {})


def test_auth_off_is_open_and_the_default() -> None:
    auth = GatewayAuthenticator(GatewayAuth())
    assert not auth.required
    auth.verify("POST", PATH, {}, BODY)
    spec = load_config_data({"discovery": {"static": {"endpoints": ["http://127.0.0.1:1"]}}}, GatewaySpec)
    assert spec.auth.mode == "none"


def test_config_errors_name_the_field_and_never_the_secret(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"auth.*secretFile"):
        load_config_data(
            {"discovery": {"static": {"endpoints": ["http://x:1"]}}, "auth": {"mode": "hmac"}}, GatewaySpec
        )
    with pytest.raises(ConfigError, match=r"auth.*tokenSha256"):
        load_config_data(
            {"discovery": {"static": {"endpoints": ["http://x:1"]}}, "auth": {"mode": "bearer"}}, GatewaySpec
        )
    short = tmp_path / "short"
    short.write_text("tiny\n")
    with pytest.raises(ConfigError, match=r"auth\.secretFile .*at least 16") as err:
        build_authenticator(GatewayAuth(mode="hmac", secret_file=str(short)))
    assert "tiny" not in str(err.value)
    with pytest.raises(ConfigError, match=r"secretEnv \(FLEETGATE_NOT_SET_ANYWHERE\)"):
        build_authenticator(GatewayAuth(mode="hmac", secret_env="FLEETGATE_NOT_SET_ANYWHERE"))


def test_secret_files_hold_one_secret_per_line_for_rotation(tmp_path: Path) -> None:
    f = tmp_path / "secret"
    f.write_text(f"{SECRET.decode()}\n{OLD_SECRET.decode()}\n")
    clock = Clock()
    auth = build_authenticator(GatewayAuth(mode="hmac", secret_file=str(f)), clock=clock)
    auth.verify("POST", PATH, signed(clock, secret=OLD_SECRET), BODY)
    router_cfg = load_config_data(
        {
            "capacity": {
                "agents": [
                    {
                        "clusterId": "a",
                        "tokenSha256": hash_key("t"),
                        "gatewayHosts": ["gw.a.internal"],
                        "gatewayAuth": {"secretFile": str(f)},
                    }
                ]
            }
        },
        GlobalRouterConfig,
    )
    signer = GatewaySigner.from_agents(router_cfg.capacity.agents, clock=clock)
    auth.verify("POST", PATH, signer.sign("a", "POST", PATH, BODY, {}), BODY)  # signs with line 1
    assert "b" not in signer and signer.sign("b", "POST", PATH, BODY, {}) == {}


def test_replay_cache_is_bounded_and_eviction_never_reopens_a_replay() -> None:
    cache = ReplayCache(window_s=30, max_entries=3)
    now = 1000.0
    for i, ts in enumerate((990, 995, 996)):
        assert cache.check_and_add(f"n{i}", ts, now)
    assert not cache.check_and_add("n1", 995, now)  # replay
    assert cache.check_and_add("n3", 999, now)  # full: evicts n0 (ts 990), floor 990
    assert len(cache) == 3
    assert not cache.check_and_add("n0", 990, now)  # the evicted nonce cannot come back
    assert not cache.check_and_add("fresh-but-old", 990, now)  # at or below the floor
    assert cache.check_and_add("n4", 1000, now + 40)  # the window moved: old entries pruned
    assert len(cache) == 1
