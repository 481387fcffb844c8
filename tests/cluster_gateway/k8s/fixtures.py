"""Fixtures (re-exported by the conftest files): an emulated kube-apiserver on loopback and a real
`kubernetes` client pointed at it."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest
from kubernetes import client

from tests.cluster_gateway.k8s.fake_apiserver import FakeApiServer


@pytest.fixture
async def apiserver() -> AsyncIterator[FakeApiServer]:
    server = FakeApiServer()
    await server.start()
    yield server
    await server.stop()


@pytest.fixture
def api_client(apiserver: FakeApiServer) -> client.ApiClient:
    return client.ApiClient(client.Configuration(host=apiserver.url))
