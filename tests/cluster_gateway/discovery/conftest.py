"""The emulated API server and a real client pointed at it (see `tests.cluster_gateway.k8s.fixtures`)."""

from tests.cluster_gateway.k8s.fixtures import api_client, apiserver

__all__ = ["api_client", "apiserver"]
