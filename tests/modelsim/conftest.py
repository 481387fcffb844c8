"""Fixtures: a running fleet of tiny simulated pods and an httpx client for it."""

from __future__ import annotations

from collections.abc import AsyncIterator

import httpx
import pytest

from modelsim.fleet import PodSpec, SimFleet

MODEL = "meta-llama/Llama-3.1-8B-Instruct"


@pytest.fixture
async def tiny_fleet() -> AsyncIterator[SimFleet]:
    fleet = SimFleet([PodSpec(profile="tiny", adapters=["sql", "chat"], preload_adapters=["sql"])])
    async with fleet:
        yield fleet


@pytest.fixture
async def client(tiny_fleet: SimFleet) -> AsyncIterator[httpx.AsyncClient]:
    async with httpx.AsyncClient(base_url=tiny_fleet.urls[0], timeout=30) as c:
        yield c
