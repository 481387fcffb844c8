"""Verify that an inference request comes from the global router (or carries a local API key).

Why here and not in Envoy: the check needs the body (the HMAC covers its digest) and must run
before the pick in both data paths, so the embedded proxy and the ext_proc picker call the same
`verify()`; with Envoy the picker answers an ImmediateResponse 401 before choosing a pod.

Accepted credentials, any one suffices:
- the router's HMAC signature (`auth.mode: hmac`), within `maxSkewS` of the gateway's clock and
  with a nonce not seen before in that window;
- the router's bearer token (`auth.mode: bearer`), compared as a SHA-256 digest;
- a local API key (`Authorization: Bearer <key>`) whose SHA-256 is in `auth.apiKeySha256`.
Digests are compared with `hmac.compare_digest` over every entry (no early exit). No secret,
token or key reaches a log line or an error message.
"""

from __future__ import annotations

import hashlib
import hmac
import logging
import time
from collections.abc import Callable, Iterable, Mapping

from cluster_gateway.auth.replay import ReplayCache
from common.config.gateway import GatewayAuth
from common.errors import OpenAIError
from common.gateway_auth import (
    AUTH_HEADERS,
    NONCE_HEADER,
    SIGNATURE_HEADER,
    TIMESTAMP_HEADER,
    TOKEN_HEADER,
    load_secrets,
    signature,
)

log = logging.getLogger("fleetgate.gateway.auth")

_MAX_NONCE = 128


def unauthorized(message: str) -> OpenAIError:
    return OpenAIError(401, message, code="invalid_api_key", headers={"www-authenticate": "Bearer"})


def _digest_match(presented: str, digests: list[bytes]) -> bool:
    got = hashlib.sha256(presented.encode("utf-8")).digest()
    found = False
    for d in digests:  # no early exit: constant work whichever entry matches
        found |= hmac.compare_digest(got, d)
    return found


def _bearer(authorization: str | None) -> str | None:
    if not authorization:
        return None
    scheme, _, token = authorization.strip().partition(" ")
    token = token.strip()
    return token if scheme.lower() == "bearer" and token else None


_CREDENTIALS = frozenset(name.encode() for name in ("authorization", *AUTH_HEADERS))


def credential_headers(raw: Iterable[tuple[bytes, bytes]]) -> dict[str, str]:
    """The headers `verify` reads, lower-case names, the first value of a repeated one (a credential
    is never a list). Only those are decoded: the proxy has decoded all of them once already."""
    out: dict[str, str] = {}
    for k, v in raw:
        name = k.lower()
        if name in _CREDENTIALS:
            out.setdefault(name.decode("latin-1"), v.decode("latin-1"))
    return out


class GatewayAuthenticator:
    """`verify()` raises a 401 OpenAIError unless the request carries an accepted credential."""

    def __init__(
        self,
        cfg: GatewayAuth,
        *,
        secrets: list[bytes] | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.cfg = cfg
        self.required = cfg.required
        self._secrets = secrets or []
        self._tokens = [bytes.fromhex(d) for d in cfg.token_sha256] if cfg.mode == "bearer" else []
        self._keys = [bytes.fromhex(d) for d in cfg.api_key_sha256]
        self._clock = clock
        self._replay = ReplayCache(cfg.max_skew_s, cfg.replay_cache_size)
        if cfg.mode == "hmac" and not self._secrets:
            raise ValueError("hmac mode needs at least one secret")

    def verify_asgi(
        self, method: str, path: str, raw_headers: Iterable[tuple[bytes, bytes]], body: bytes
    ) -> None:
        """The embedded proxy's entry point (ASGI header pairs)."""
        if self.required:
            self.verify(method, path, credential_headers(raw_headers), body)

    def verify(self, method: str, path: str, headers: Mapping[str, str], body: bytes) -> None:
        """Headers: lower-case names. Raises OpenAIError(401) when no credential is accepted."""
        if not self.required:
            return
        key = _bearer(headers.get("authorization"))
        if key is not None and self._keys and _digest_match(key, self._keys):
            return
        if self.cfg.mode == "hmac" and SIGNATURE_HEADER in headers:
            self._verify_signature(method, path, headers, body)
            return
        if self.cfg.mode == "bearer" and TOKEN_HEADER in headers:
            if _digest_match(headers[TOKEN_HEADER], self._tokens):
                return
            raise unauthorized("The gateway token is not valid.")
        if key is not None:
            raise unauthorized("Incorrect API key provided.")
        raise unauthorized(
            "This cluster gateway accepts requests only from its global router "
            "(or with a local API key: `Authorization: Bearer <key>`)."
        )

    def _verify_signature(self, method: str, path: str, headers: Mapping[str, str], body: bytes) -> None:
        ts_text = headers.get(TIMESTAMP_HEADER, "")
        nonce = headers.get(NONCE_HEADER, "")
        presented = headers.get(SIGNATURE_HEADER, "")
        if not ts_text.isdigit() or not nonce or len(nonce) > _MAX_NONCE:
            raise unauthorized("Malformed request signature (timestamp or nonce missing).")
        ts = int(ts_text)
        now = self._clock()
        if abs(now - ts) > self.cfg.max_skew_s:
            raise unauthorized(
                f"Request signature expired or from the future (allowed clock skew ±{self.cfg.max_skew_s}s)."
            )
        ok = False
        for secret in self._secrets:  # rotation: any configured secret; no early exit
            expected = signature(secret, method, path, ts_text, nonce, body)
            ok |= hmac.compare_digest(expected.encode(), presented.encode("latin-1", "replace"))
        if not ok:
            raise unauthorized("Invalid request signature.")
        if not self._replay.check_and_add(nonce, ts, now):
            log.warning("refused a replayed router signature (nonce already used)")
            raise unauthorized("Request signature already used (replay refused).")


def build_authenticator(cfg: GatewayAuth, *, clock: Callable[[], float] = time.time) -> GatewayAuthenticator:
    """Load the secret(s) the config names (ConfigError naming `auth.*` when unusable)."""
    secrets = load_secrets(cfg.secret_file, cfg.secret_env, "auth") if cfg.mode == "hmac" else None
    return GatewayAuthenticator(cfg, secrets=secrets, clock=clock)
