"""Envoy's proof that a call on the picker's ports is its own: a shared token, kept as a digest.

The ext_authz check and the access-log calls change the gateway's state without a client's
credential (a check takes a pod slot, a log entry releases one or feeds outlier detection), so
with `extProc.envoyTokenSha256` set each must carry the token: the check as a header Envoy adds
(`headers_to_add` overwrites a client's copy), the log calls as gRPC metadata (`initial_metadata`).
Compared in constant work over every digest; the token itself is never stored or logged here.
"""

from __future__ import annotations

import hashlib
import hmac

ENVOY_TOKEN_HEADER = "x-fleetgate-envoy-token"


class EnvoyToken:
    def __init__(self, sha256_hex: list[str]) -> None:
        self._digests = [bytes.fromhex(d) for d in sha256_hex]

    @property
    def required(self) -> bool:
        return bool(self._digests)

    def accepts(self, presented: bytes | str | None) -> bool:
        """True when no token is configured or `presented` is one of the configured ones."""
        if not self._digests:
            return True
        if presented is None:
            return False
        raw = presented.encode("latin-1", "replace") if isinstance(presented, str) else presented
        got = hashlib.sha256(raw).digest()
        ok = False
        for d in self._digests:  # no early exit: constant work whichever entry matches
            ok |= hmac.compare_digest(got, d)
        return ok
