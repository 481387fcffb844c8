"""Who may read `/fleet` and the status page `/`.

They show every cluster's gateway URL, so by default they need the admin key or one of the
read-only `statusKeySha256` keys (401 without one; 403 when neither kind of key is configured).
`publicStatus: true` opens them to anyone but removes the gateway URLs (a caller presenting an
admin or status key still sees them).
"""

from __future__ import annotations

import hashlib
import hmac
from typing import Any

from common.config.router import GlobalRouterConfig
from common.errors import OpenAIError
from global_router.tenants import bearer_token

REDACTED_FIELDS = ("gateway_url",)


class StatusAccess:
    def __init__(self, cfg: GlobalRouterConfig) -> None:
        self.public = cfg.public_status
        digests = [*cfg.status_key_sha256, *([cfg.admin_key_sha256] if cfg.admin_key_sha256 else [])]
        self._digests = [bytes.fromhex(d) for d in digests]

    def _key_ok(self, authorization: str | None) -> bool | None:
        """True/False for a presented key; None when no key was presented."""
        token = bearer_token(authorization)
        if token is None:
            return None
        presented = hashlib.sha256(token.encode("utf-8")).digest()
        found = False
        for d in self._digests:  # no early exit
            found |= hmac.compare_digest(presented, d)
        return found

    def authorize(self, authorization: str | None) -> bool:
        """Whether the caller may see internal URLs; raises 401/403 when it may not read at all."""
        ok = self._key_ok(authorization)
        if ok:
            return True
        if self.public:
            return False
        if not self._digests:
            raise OpenAIError(
                403,
                "The fleet status is private: set `adminKeySha256` or `statusKeySha256` in the router "
                "config (or `publicStatus: true` for a view without gateway URLs).",
            )
        raise OpenAIError(
            401,
            "The fleet status needs `Authorization: Bearer <admin or status key>`."
            if ok is None
            else "Incorrect status key provided.",
            code="invalid_api_key",
            headers={"www-authenticate": "Bearer"},
        )


def redact(report: dict[str, Any]) -> dict[str, Any]:
    """The fleet report without internal URLs (for `publicStatus: true`)."""
    clusters = [{k: v for k, v in c.items() if k not in REDACTED_FIELDS} for c in report["clusters"]]
    return {**report, "clusters": clusters}
