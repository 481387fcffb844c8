"""The router's credential on every request it forwards to a cluster gateway.

Each cluster has its own secret (`capacity.agents[].gatewayAuth`), so a leaked secret opens one
cluster, not the fleet. In `hmac` mode every attempt gets a fresh timestamp and nonce (a failover
attempt to another cluster is signed with that cluster's secret); in `bearer` mode the secret is
sent as a token. Secrets are read once at start and never logged. A cluster with no
`gatewayAuth` gets no credential headers (its gateway must then run without auth: warned at start).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence

from common.config.router import AgentAuth
from common.gateway_auth import (
    NONCE_HEADER,
    SIGNATURE_HEADER,
    TIMESTAMP_HEADER,
    TOKEN_HEADER,
    load_secrets,
    signature,
)
from common.nonces import Nonces

log = logging.getLogger("fleetgate.router.gateway_auth")


class GatewaySigner:
    def __init__(
        self,
        credentials: dict[str, tuple[str, bytes]],
        *,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self._creds = credentials  # cluster id -> (mode, current secret)
        self._clock = clock
        self._nonce = Nonces(16)

    @classmethod
    def from_agents(
        cls, agents: Sequence[AgentAuth], *, clock: Callable[[], float] = time.time
    ) -> GatewaySigner:
        """Load each cluster's secret (ConfigError naming `capacity.agents[i].gatewayAuth`)."""
        creds: dict[str, tuple[str, bytes]] = {}
        for i, agent in enumerate(agents):
            ga = agent.gateway_auth
            if ga is None:
                if agent.cluster_id not in creds:
                    log.warning(
                        "cluster %r has no gatewayAuth: its gateway must accept unauthenticated requests "
                        "(anyone reaching it bypasses the router; docs/security.md)",
                        agent.cluster_id,
                    )
                continue
            field = f"capacity.agents[{i}].gatewayAuth"
            creds[agent.cluster_id] = (ga.mode, load_secrets(ga.secret_file, ga.secret_env, field)[0])
        return cls(creds, clock=clock)

    def __contains__(self, cluster_id: str) -> bool:
        return cluster_id in self._creds

    def sign(
        self, cluster_id: str, method: str, path: str, body: bytes, headers: dict[str, str]
    ) -> dict[str, str]:
        """`headers` plus this cluster's credential (a new dict; unchanged for a cluster without one)."""
        cred = self._creds.get(cluster_id)
        if cred is None:
            return headers
        mode, secret = cred
        if mode == "bearer":
            return {**headers, TOKEN_HEADER: secret.decode("utf-8")}
        ts = str(int(self._clock()))
        nonce = self._nonce()
        return {
            **headers,
            TIMESTAMP_HEADER: ts,
            NONCE_HEADER: nonce,
            SIGNATURE_HEADER: signature(secret, method, path, ts, nonce, body),
        }
