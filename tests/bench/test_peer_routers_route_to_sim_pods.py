"""The routing bench's peer routers (sglang-router, vllm-router from .venv-peers) really start from
_peer_command (on defaults and with the `@tuned` flags), become ready in front of simulated pods and route the bench client's requests to them;
a peer that cannot start or fails every request is reported as a failure, not as a clean run.

Skipped when the peers are not installed (`fleetgate bench routing --peers` installs them)."""

from __future__ import annotations

from pathlib import Path

import pytest

from bench.routing import MODEL, PEER_POLICIES, PEERS_VENV, PolicyRun, Setup, run_policy
from bench.routing_scenarios import PodGroup, RoutingScenario
from bench.trace import TraceRequest, TraceSpec

EXES = {"sglang": PEERS_VENV / "bin" / "sglang-router", "vllm": PEERS_VENV / "bin" / "vllm-router"}
SETUP = Setup(
    scenario=RoutingScenario("two-tiny-pods", "test fleet", (PodGroup("tiny", 2),), TraceSpec()),
    time_scale=1.0,
    trace=TraceSpec(),
)


def _needs(family: str) -> pytest.MarkDecorator:
    return pytest.mark.skipif(
        not EXES[family].exists(),
        reason=f"{EXES[family]} not installed (run `fleetgate bench routing --peers` to install the peer routers)",
    )


def _trace(model: str = MODEL) -> list[TraceRequest]:
    """One streamed chat and one unary call: both paths of the bench client."""
    return [
        TraceRequest(0.0, "chat", model, (("user", "hello there, router"),), 4, -1, stream=True),
        TraceRequest(0.05, "long", model, (("user", "a batch job for the router"),), 4, -1, stream=False),
    ]


def _run(policy: str, tmp_path: Path, trace: list[TraceRequest]) -> PolicyRun:
    run = run_policy(policy, SETUP, trace, tmp_path)
    assert run is not None, f"{policy}: peer not found although installed"
    return run


@pytest.mark.timeout(60)
@pytest.mark.parametrize(
    "policy", [pytest.param(p, marks=_needs(p.split(":", 1)[0])) for p in PEER_POLICIES], ids=PEER_POLICIES
)
def test_peer_routes_the_bench_clients_requests_to_the_pods(policy: str, tmp_path: Path) -> None:
    run = _run(policy, tmp_path, _trace())
    assert run.failure == "", run.failure
    assert run.summary is not None
    assert [(r.status, r.error) for r in run.results] == [(200, ""), (200, "")]
    assert run.results[0].ttft_s is not None and run.results[0].output_tokens == 4
    assert run.results[1].output_tokens == 4
    # the pods' own counters saw both requests: the peer forwarded them, nothing answered in its place
    assert len(run.pod_requests) == 2 and sum(run.pod_requests.values()) == 2
    assert (tmp_path / f"front-{policy.replace(':', '_')}.log").exists()  # the peer logged to the bench dir


@pytest.mark.timeout(60)
@_needs("sglang")
def test_peer_that_fails_every_request_is_a_failed_run(tmp_path: Path) -> None:
    run = _run("sglang:round_robin", tmp_path, _trace(model="no-such-model"))
    assert run.summary is not None and run.summary.errors == 2
    assert run.failure.startswith("every request failed (first: 404"), run.failure


@pytest.mark.timeout(60)
@_needs("vllm")
def test_peer_that_does_not_start_is_a_failed_run(tmp_path: Path) -> None:
    run = _run("vllm:no_such_policy", tmp_path, _trace())
    assert run.summary is None and run.results == []
    assert run.failure.startswith("did not start: process for"), run.failure
    assert "front-vllm_no_such_policy.log" in run.failure and "invalid choice" in run.failure
