"""Who may use this gateway: the global router's per-cluster credential, or a local API key."""

from cluster_gateway.auth.verifier import GatewayAuthenticator, build_authenticator

__all__ = ["GatewayAuthenticator", "build_authenticator"]
