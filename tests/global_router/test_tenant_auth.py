"""API keys: hashed in config, Bearer auth, 401/403 in OpenAI shape."""

from __future__ import annotations

import pytest

from common.config.router import Tenant
from common.errors import OpenAIError
from global_router.tenants import ANONYMOUS, TenantDirectory, check_admin, hash_key


def _dir(anonymous: bool = False) -> TenantDirectory:
    return TenantDirectory(
        [
            Tenant(name="acme", api_key_sha256=[hash_key("sk-acme-1"), hash_key("sk-acme-2")]),
            Tenant(name="lab", api_key_sha256=[hash_key("sk-lab")], allowed_models=["m1"]),
        ],
        allow_anonymous=anonymous,
    )


def test_hash_key_is_sha256_hex() -> None:
    assert len(hash_key("sk-test")) == 64
    assert hash_key("a") == "ca978112ca1bbdcafac231b39a23dc4da786eff8147c4e72b9807785afee48bb"


def test_valid_keys_map_to_their_tenant() -> None:
    d = _dir()
    assert d.authenticate("Bearer sk-acme-2").name == "acme"
    assert d.authenticate("bearer sk-lab").name == "lab"


@pytest.mark.parametrize("header", [None, "", "Bearer", "Basic abc", "Bearer sk-wrong"])
def test_missing_or_invalid_key_is_401_invalid_api_key(header: str | None) -> None:
    with pytest.raises(OpenAIError) as ei:
        _dir().authenticate(header)
    assert ei.value.status == 401
    assert ei.value.code == "invalid_api_key"
    assert ei.value.body()["error"]["type"] == "authentication_error"


def test_anonymous_only_when_enabled() -> None:
    assert _dir(anonymous=True).authenticate(None) is ANONYMOUS
    assert _dir(anonymous=True).authenticate("Bearer sk-lab").name == "lab"


def test_model_allow_list_is_403() -> None:
    d = _dir()
    lab = d.authenticate("Bearer sk-lab")
    d.check_model(lab, "m1")
    with pytest.raises(OpenAIError) as ei:
        d.check_model(lab, "m2")
    assert ei.value.status == 403 and ei.value.code == "model_not_allowed"
    assert d.visible_models(lab, ["m1", "m2"]) == ["m1"]


def test_admin_key() -> None:
    digest = hash_key("admin-secret")
    check_admin("Bearer admin-secret", digest)
    with pytest.raises(OpenAIError) as ei:
        check_admin("Bearer nope", digest)
    assert ei.value.status == 401
    with pytest.raises(OpenAIError) as ei:
        check_admin("Bearer admin-secret", None)
    assert ei.value.status == 403
