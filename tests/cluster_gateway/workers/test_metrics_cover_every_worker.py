"""`fleetgate gateway --workers 2`: whichever process a scrape reaches, `/metrics` counts the
requests every process served (workers ship their counters over the pool feed)."""

from __future__ import annotations

import re
import signal
import time

import httpx
import pytest
from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from cluster_gateway.observability import OK, GatewayMetrics
from cluster_gateway.pool import Endpoint, EndpointPool
from cluster_gateway.workers.metrics_feed import MergedRegistry, ProcessGroupMetrics, counter_samples
from modelsim.fleet import SimFleet
from tests.procs import fleetgate

MODEL = "meta-llama/Llama-3.1-8B-Instruct"
REQUESTS = 24


def _ok_requests(body: str) -> float:
    return sum(
        s.value
        for f in text_string_to_metric_families(body)
        if f.name == "fleetgate_gateway_requests"
        for s in f.samples
        if s.name.endswith("_total") and s.labels.get("outcome") == OK
    )


def test_every_scrape_counts_every_process(sim: SimFleet) -> None:
    p = fleetgate("gateway", "--pods", ",".join(sim.urls), "--port", "0", "--workers", "2")
    try:
        assert p.stderr is not None
        port, worker_up, lines = None, False, []
        deadline = time.monotonic() + 60
        while (port is None or not worker_up) and time.monotonic() < deadline:
            line = p.stderr.readline()
            if not line:
                break
            lines.append(line)
            if m := re.search(r"listening on http://127\.0\.0\.1:(\d+)", line):
                port = int(m.group(1))
            worker_up = worker_up or "gateway worker 1" in line
        assert port and worker_up, lines
        url = f"http://127.0.0.1:{port}"
        served_by: set[int] = set()
        for _ in range(200):  # until both processes answered (new connections: the kernel spreads them)
            with httpx.Client(base_url=url, timeout=10) as c:
                served_by.add(c.get("/health").json()["worker"])
            if served_by == {0, 1}:
                break
        assert served_by == {0, 1}
        body = {"model": MODEL, "messages": [{"role": "user", "content": "q"}], "max_tokens": 2}
        for _ in range(REQUESTS):
            with httpx.Client(base_url=url, timeout=30) as c:  # one connection each: both processes serve
                assert c.post("/v1/chat/completions", json=body).status_code == 200
        # every scrape, on whichever process, converges on the group's total (~1 s shipping)
        settled: list[float] = []
        deadline = time.monotonic() + 30
        while len(settled) < 12 and time.monotonic() < deadline:
            with httpx.Client(base_url=url, timeout=10) as c:
                r = c.get("/metrics")
            assert r.status_code == 200
            n = _ok_requests(r.text)
            settled = [*settled, n] if n == REQUESTS else []
            assert n <= REQUESTS
        assert len(settled) == 12, f"scrapes did not all show {REQUESTS} requests"
        p.send_signal(signal.SIGTERM)
        assert p.wait(timeout=30) == 0
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()


def test_merge_sums_shared_series_adds_a_workers_own_and_keeps_retired_totals() -> None:
    pool = EndpointPool()
    pool.set_endpoints([Endpoint(name=n, address="127.0.0.1", port=9000 + i) for i, n in enumerate("abc")])
    main, worker = GatewayMetrics(), GatewayMetrics()
    main.watch_pool(pool, lambda: 0)
    main.request_done("a", "default", OK)
    main.ttft.labels("a").observe(0.05)
    for _ in range(3):
        worker.request_done("a", "default", OK)
    worker.request_done("b", "default", OK)  # a series only the worker has
    worker.ttft.labels("a").observe(2.0)
    group = ProcessGroupMetrics()
    group.update(1, counter_samples(worker.registry))
    main.group = group

    def values() -> dict[tuple[str, str], float]:
        fams = text_string_to_metric_families(main.render()[0].decode())
        return {
            (s.name, s.labels.get("pod", "") + s.labels.get("le", "")): s.value
            for f in fams
            for s in f.samples
            if f.name in ("fleetgate_gateway_requests", "fleetgate_gateway_ttft_seconds")
        }

    v = values()
    assert v[("fleetgate_gateway_requests_total", "a")] == 4
    assert v[("fleetgate_gateway_requests_total", "b")] == 1
    assert v[("fleetgate_gateway_ttft_seconds_count", "a")] == 2
    assert v[("fleetgate_gateway_ttft_seconds_bucket", "a0.05")] == 1  # main's fast one only
    assert v[("fleetgate_gateway_ttft_seconds_sum", "a")] == pytest.approx(2.05)
    group.retire(1)  # the worker exited: its counts stay in the sums
    assert values()[("fleetgate_gateway_requests_total", "a")] == 4
    pool.set_endpoints([Endpoint(name="a", address="127.0.0.1", port=9000)])  # b left
    assert ("fleetgate_gateway_requests_total", "b") not in values()
    assert isinstance(main._renderable(), MergedRegistry)
    assert generate_latest(main._renderable())  # type: ignore[arg-type]
