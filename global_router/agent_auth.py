"""Who is this agent? Bearer tokens in gRPC metadata, each bound to exactly one cluster id.

The config stores only SHA-256 digests of tokens. A presented token is hashed and compared with
every configured digest in constant time (no early exit, so timing reveals neither which digest
nor how many bytes matched). Tokens and digests never reach a log line or an error message.
"""

from __future__ import annotations

import hashlib
import hmac
from collections.abc import Iterable, Sequence

from common.config.loader import ConfigError
from common.config.router import AgentAuth

BEARER = "bearer "


class AuthError(Exception):
    """The caller is not a known agent. The message is safe to return to the caller."""


def hash_token(token: str) -> str:
    """The digest to put in `capacity.agents[].tokenSha256` for a token."""
    return hashlib.sha256(token.encode()).hexdigest()


def bearer_token(metadata: Iterable[tuple[str, str | bytes]] | None) -> str | None:
    """The token from an `authorization: Bearer <token>` entry, or None if absent or malformed."""
    for key, value in metadata or ():
        if key.lower() != "authorization":
            continue
        text = value.decode(errors="replace") if isinstance(value, bytes) else value
        if text[: len(BEARER)].lower() != BEARER:
            return None
        token = text[len(BEARER) :].strip()
        return token or None
    return None


class AgentAuthenticator:
    """Maps a bearer token to the one cluster it may report for."""

    def __init__(self, agents: Sequence[AgentAuth]) -> None:
        seen: dict[bytes, str] = {}
        for i, agent in enumerate(agents):
            if not agent.cluster_id:
                raise ConfigError(f"capacity.agents[{i}].clusterId: must not be empty")
            digest = bytes.fromhex(agent.token_sha256)
            other = seen.get(digest)
            if other is not None and other != agent.cluster_id:
                raise ConfigError(
                    f"capacity.agents[{i}].tokenSha256: the same token is already bound to another "
                    "cluster; a token must identify exactly one cluster"
                )
            seen[digest] = agent.cluster_id
        # Several digests may map to one cluster (token rotation).
        self._digests: list[tuple[bytes, str]] = list(seen.items())

    def __len__(self) -> int:
        return len(self._digests)

    def cluster_for_token(self, token: str) -> str | None:
        presented = hashlib.sha256(token.encode()).digest()
        match: str | None = None
        for digest, cluster_id in self._digests:
            if hmac.compare_digest(presented, digest):
                match = cluster_id  # keep looping: constant work whatever matches
        return match

    def authenticate(self, metadata: Iterable[tuple[str, str | bytes]] | None) -> str:
        """The caller's cluster id; raises AuthError for a missing, malformed or unknown token."""
        token = bearer_token(metadata)
        if token is None:
            raise AuthError("missing `authorization: Bearer <token>` metadata")
        cluster_id = self.cluster_for_token(token)
        if cluster_id is None:
            raise AuthError("unknown agent token")
        return cluster_id
