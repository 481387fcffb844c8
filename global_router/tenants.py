"""Who is calling: API keys (stored only as SHA-256 digests) → tenants, and what they may use.

Keys never live in config or memory in clear: the presented key is hashed and compared against
every stored digest with `hmac.compare_digest`, without an early exit, so response time does not
reveal which digest (or how much of one) matched.
"""

from __future__ import annotations

import hashlib
import hmac

from common.config.router import GlobalRouterConfig, Tenant
from common.errors import OpenAIError

ANONYMOUS = Tenant(name="anonymous", api_key_sha256=[])


def hash_key(key: str) -> str:
    """The form a key takes in config (`tenants[].apiKeySha256`): SHA-256 hex of the UTF-8 key."""
    return hashlib.sha256(key.encode("utf-8")).hexdigest()


def _unauthorized(message: str) -> OpenAIError:
    return OpenAIError(401, message, code="invalid_api_key", headers={"www-authenticate": "Bearer"})


def bearer_token(authorization: str | None) -> str | None:
    """`Bearer <key>` → key; anything else → None."""
    if not authorization:
        return None
    scheme, _, token = authorization.strip().partition(" ")
    token = token.strip()
    if scheme.lower() != "bearer" or not token:
        return None
    return token


class TenantDirectory:
    """Authenticates requests and applies each tenant's model allow-list."""

    def __init__(self, tenants: list[Tenant], *, allow_anonymous: bool = False) -> None:
        self._entries: list[tuple[bytes, Tenant]] = [
            (bytes.fromhex(digest), t) for t in tenants for digest in t.api_key_sha256
        ]
        self._allow_anonymous = allow_anonymous
        self._by_name = {t.name: t for t in tenants}

    @classmethod
    def from_config(cls, cfg: GlobalRouterConfig) -> TenantDirectory:
        return cls(cfg.tenants, allow_anonymous=cfg.allow_anonymous)

    def tenants(self) -> list[Tenant]:
        return list(self._by_name.values())

    def authenticate(self, authorization: str | None) -> Tenant:
        """The tenant owning the bearer key, or a 401 `invalid_api_key` OpenAI error."""
        token = bearer_token(authorization)
        if token is None:
            if self._allow_anonymous:
                return ANONYMOUS
            if authorization:
                raise _unauthorized("Malformed Authorization header: expected `Bearer <API key>`.")
            raise _unauthorized(
                "You didn't provide an API key. Send it as `Authorization: Bearer <API key>`."
            )
        presented = hashlib.sha256(token.encode("utf-8")).digest()
        found: Tenant | None = None
        for digest, tenant in self._entries:  # no early exit: constant time in the match position
            if hmac.compare_digest(presented, digest) and found is None:
                found = tenant
        if found is not None:
            return found
        if self._allow_anonymous:
            return ANONYMOUS
        raise _unauthorized("Incorrect API key provided.")

    @staticmethod
    def check_model(tenant: Tenant, model: str) -> None:
        """403 when the tenant's allow-list excludes the model (served or not: don't leak the catalogue)."""
        if tenant.allowed_models is not None and model not in tenant.allowed_models:
            raise OpenAIError(
                403,
                f"Your API key is not allowed to use the model `{model}`.",
                param="model",
                code="model_not_allowed",
            )

    @staticmethod
    def visible_models(tenant: Tenant, models: list[str]) -> list[str]:
        if tenant.allowed_models is None:
            return models
        allowed = set(tenant.allowed_models)
        return [m for m in models if m in allowed]


def check_admin(authorization: str | None, admin_key_sha256: str | None) -> None:
    """Admin endpoints: 403 when no admin key is configured, 401 on a wrong key."""
    if admin_key_sha256 is None:
        raise OpenAIError(403, "Admin endpoints are disabled: set `adminKeySha256` in the router config.")
    token = bearer_token(authorization)
    if token is None:
        raise _unauthorized("Admin endpoints need `Authorization: Bearer <admin key>`.")
    presented = hashlib.sha256(token.encode("utf-8")).digest()
    if not hmac.compare_digest(presented, bytes.fromhex(admin_key_sha256)):
        raise _unauthorized("Incorrect admin key provided.")
