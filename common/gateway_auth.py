"""The router → gateway credential, shared by both tiers: header names, the signed string, secrets.

Why it lives in `common/`: the global router signs and the cluster gateway verifies, and neither
tier may import the other, so the one definition of what is signed sits here.

Two modes:
- `hmac` (default in every shipped example): the router sends
  `x-fleetgate-auth-timestamp` (unix seconds), `x-fleetgate-auth-nonce` (random hex) and
  `x-fleetgate-auth-signature: v1=<hex HMAC-SHA256>` over method, path, timestamp, nonce and the
  SHA-256 of the body. A captured request cannot be replayed (timestamp window + nonce cache) nor
  altered (body digest), and the secret never crosses the wire. Verifying an HMAC needs the secret
  itself, so in this mode the gateway reads the secret from a file or an environment variable.
- `bearer`: the router sends the secret as `x-fleetgate-auth-token`; the gateway holds only its
  SHA-256 digest. Simpler, but a captured request reveals the secret: use only over TLS.
All header names start with `x-fleetgate-`, which both tiers strip from client requests and the
gateway never forwards to pods, so a client cannot inject them and a pod never sees them.
"""

from __future__ import annotations

import hashlib
import hmac
import os
from pathlib import Path

from common.config.loader import ConfigError

TIMESTAMP_HEADER = "x-fleetgate-auth-timestamp"
NONCE_HEADER = "x-fleetgate-auth-nonce"
SIGNATURE_HEADER = "x-fleetgate-auth-signature"
TOKEN_HEADER = "x-fleetgate-auth-token"
AUTH_HEADERS = frozenset({TIMESTAMP_HEADER, NONCE_HEADER, SIGNATURE_HEADER, TOKEN_HEADER})
SIGNATURE_VERSION = "v1"


def body_digest(body: bytes) -> str:
    return hashlib.sha256(body).hexdigest()


def signed_string(method: str, path: str, timestamp: str, nonce: str, body: bytes) -> bytes:
    """What the HMAC covers. The query string is not part of `path` (inference routes ignore it);
    the Host header is not either (load balancers rewrite it)."""
    return "\n".join((SIGNATURE_VERSION, method.upper(), path, timestamp, nonce, body_digest(body))).encode(
        "utf-8"
    )


def signature(secret: bytes, method: str, path: str, timestamp: str, nonce: str, body: bytes) -> str:
    """The `x-fleetgate-auth-signature` value: `v1=<hex>`."""
    mac = hmac.new(secret, signed_string(method, path, timestamp, nonce, body), hashlib.sha256)
    return f"{SIGNATURE_VERSION}={mac.hexdigest()}"


def load_secrets(secret_file: str | None, secret_env: str | None, field: str) -> list[bytes]:
    """Secrets from a file (one per line: several while rotating) or an environment variable.

    The first one is the current secret (what a signer uses); a verifier accepts any of them.
    Errors name the field and the file or variable, never a secret.
    """
    if secret_file is not None:
        path = Path(secret_file)
        try:
            text = path.read_text()
        except OSError as exc:
            raise ConfigError(f"{field}.secretFile: cannot read {path}: {exc.strerror}") from None
        except UnicodeDecodeError:
            raise ConfigError(f"{field}.secretFile: {path} is not UTF-8 text") from None
        source = f"{field}.secretFile ({path})"
    elif secret_env is not None:
        text = os.environ.get(secret_env, "")
        source = f"{field}.secretEnv ({secret_env})"
    else:
        raise ConfigError(f"{field}: set `secretFile` or `secretEnv`")
    secrets = [line.strip() for line in text.splitlines() if line.strip()]
    if not secrets:
        raise ConfigError(f"{source}: no secret found (empty or unset)")
    for s in secrets:
        if len(s) < 16:
            raise ConfigError(f"{source}: a secret must be at least 16 characters")
        if any(c.isspace() or not c.isprintable() for c in s):
            raise ConfigError(f"{source}: a secret must be one line of printable characters")
    return [s.encode("utf-8") for s in secrets]
