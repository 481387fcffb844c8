"""Agents prove who they are with a bearer token bound to one cluster id."""

from __future__ import annotations

import asyncio
import contextlib

import grpc
import pytest

from common.config.router import AgentAuth
from common.proto.fleetgate.v1 import capacity_pb2, capacity_pb2_grpc
from global_router.agent_auth import AgentAuthenticator, AuthError, bearer_token, hash_token
from tests.eventually import eventually
from tests.global_router.capacity.helpers import (
    TOKEN_A,
    TOKEN_B,
    report,
    running_agent,
    running_server,
    sample_pool,
)


async def _first_reply(
    port: int, metadata: tuple[tuple[str, str], ...], msg: capacity_pb2.CapacityReport
) -> object:
    async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as ch:
        call = capacity_pb2_grpc.CapacityServiceStub(ch).Report(metadata=metadata, timeout=5)
        # the server may close the stream before our first message is written
        with contextlib.suppress(grpc.aio.AioRpcError, asyncio.InvalidStateError):
            await call.write(msg)
        return await call.read()


@pytest.mark.parametrize(
    "metadata",
    [(), (("authorization", "Bearer not-a-known-token"),), (("authorization", TOKEN_A),)],
    ids=["missing", "unknown", "not-bearer"],
)
async def test_missing_or_bad_token_is_unauthenticated(metadata: tuple[tuple[str, str], ...]) -> None:
    async with running_server() as (server, port, fleet):
        with pytest.raises(grpc.aio.AioRpcError) as err:
            await _first_reply(port, metadata, report("c-a"))
        assert err.value.code() == grpc.StatusCode.UNAUTHENTICATED
        assert TOKEN_A not in (err.value.details() or "")
        assert fleet.snapshot() == []
        assert server.connected_clusters() == []


async def test_token_of_cluster_a_cannot_report_for_cluster_b() -> None:
    async with running_server() as (_, port, fleet):
        with pytest.raises(grpc.aio.AioRpcError) as err:
            await _first_reply(port, (("authorization", f"Bearer {TOKEN_A}"),), report("c-b"))
        assert err.value.code() == grpc.StatusCode.PERMISSION_DENIED
        assert fleet.get("c-b") is None


async def test_each_token_reports_for_its_own_cluster() -> None:
    async with running_server() as (_, port, fleet):
        reply = await _first_reply(port, (("authorization", f"Bearer {TOKEN_B}"),), report("c-b", seq=3))
        assert isinstance(reply, capacity_pb2.Directive)
        assert reply.ack.sequence == 3
        assert fleet.get("c-b") is not None


async def test_a_real_agent_with_a_wrong_token_never_connects() -> None:
    async with (
        running_server() as (_, port, fleet),
        running_agent(port, sample_pool(), token="wrong-token") as agent,
    ):
        await eventually(lambda: agent.last_error is not None, what="refusal")
        await asyncio.sleep(0.3)
        assert not agent.connected
        assert "UNAUTHENTICATED" in (agent.last_error or "")
        assert "wrong-token" not in (agent.last_error or "")
        assert fleet.snapshot() == []


async def test_a_real_agent_claiming_another_cluster_is_refused() -> None:
    async with (
        running_server() as (_, port, fleet),
        running_agent(port, sample_pool(), token=TOKEN_A, cluster_id="c-b") as agent,
    ):
        await eventually(lambda: "PERMISSION_DENIED" in (agent.last_error or ""), what="refusal")
        assert fleet.get("c-b") is None


def test_bearer_parsing_is_case_insensitive_and_strict() -> None:
    assert bearer_token([("authorization", "Bearer abc")]) == "abc"
    assert bearer_token([("Authorization", "bearer abc ")]) == "abc"
    assert bearer_token([("authorization", "Basic abc")]) is None
    assert bearer_token([("authorization", "Bearer ")]) is None
    assert bearer_token([]) is None


def test_authenticator_maps_tokens_to_clusters_and_rejects_unknown() -> None:
    auth = AgentAuthenticator(
        [
            AgentAuth(cluster_id="a", token_sha256=hash_token("t1"), gateway_hosts=["*"]),
            AgentAuth(cluster_id="a", token_sha256=hash_token("t1-rotated"), gateway_hosts=["*"]),
            AgentAuth(cluster_id="b", token_sha256=hash_token("t2"), gateway_hosts=["*"]),
        ]
    )
    assert auth.authenticate([("authorization", "Bearer t1")]) == "a"
    assert auth.authenticate([("authorization", "Bearer t1-rotated")]) == "a"
    assert auth.authenticate([("authorization", "Bearer t2")]) == "b"
    with pytest.raises(AuthError):
        auth.authenticate([("authorization", "Bearer t3")])


def test_one_token_bound_to_two_clusters_is_a_config_error() -> None:
    with pytest.raises(ValueError, match=r"capacity\.agents\[1\]\.tokenSha256"):
        AgentAuthenticator(
            [
                AgentAuth(cluster_id="a", token_sha256=hash_token("same"), gateway_hosts=["*"]),
                AgentAuth(cluster_id="b", token_sha256=hash_token("same"), gateway_hosts=["*"]),
            ]
        )
