"""Pod speed from cumulative histograms (PerfWindow), and the figures each engine's /metrics yields."""

from __future__ import annotations

import asyncio
import time

import httpx
import pytest

from cluster_gateway.metrics.engines import read_pod_sample
from cluster_gateway.metrics.perf_window import PerfWindow, derive_perf, window_means
from cluster_gateway.pool import PodMetrics
from modelsim.fleet import PodSpec, SimFleet

MODEL = "meta-llama/Llama-3.1-8B-Instruct"


def gauges(waiting: int = 0, running: int = 0, kv: float | None = 0.2) -> PodMetrics:
    return PodMetrics(engine="vllm", waiting=waiting, running=running, kv_usage=kv)


def test_window_mean_is_the_difference_of_two_readings_and_lifetime_when_idle() -> None:
    old = {"itl": (1.0, 100.0)}
    assert window_means(old, {"itl": (3.0, 120.0)}) == {"itl": pytest.approx(0.1)}
    assert window_means(old, {"itl": (1.0, 100.0)}) == {"itl": pytest.approx(0.01)}  # lifetime
    assert window_means({}, {"itl": (0.0, 0.0)}) == {}  # nothing served: unknown


def test_old_readings_leave_the_window() -> None:
    w = PerfWindow(window_s=10.0)
    w.update("p", 0.0, {"inference": (10.0, 10.0)}, gauges())  # 1 s a request long ago
    w.update("p", 5.0, {"inference": (20.0, 20.0)}, gauges())
    w.update("p", 20.0, {"inference": (60.0, 30.0)}, gauges())
    perf = w.update("p", 25.0, {"inference": (100.0, 40.0)}, gauges())
    assert perf.service_s == pytest.approx(4.0)  # (100 - 60) / (40 - 30): the 1 s era is gone


def test_a_restart_clears_the_history_and_the_learned_cap() -> None:
    w = PerfWindow()
    for t, done in ((0.0, 100.0), (1.0, 101.0)):
        perf = w.update("p", t, {"inference": (50.0, done)}, gauges(waiting=3, running=8, kv=0.3))
    assert perf.running_cap == 8
    perf = w.update("p", 2.0, {"inference": (0.2, 10.0)}, gauges())  # counts went back
    assert perf.running_cap is None
    assert perf.service_s == pytest.approx(0.02)


def test_the_running_cap_is_learned_only_when_the_count_holds_through_finishes() -> None:
    w = PerfWindow(cap_hold_s=1.0)

    def step(t: float, done: float, m: PodMetrics) -> int | None:
        return w.update("p", t, {"e2e": (done, done)}, m).running_cap

    # A long prefill step: 16 running, 4 waiting, nothing finishes while it lasts.
    assert step(0.0, 0.0, gauges(waiting=4, running=16, kv=0.05)) is None
    assert step(1.5, 0.0, gauges(waiting=4, running=16, kv=0.05)) is None
    # KV-bound queues say nothing about the engine's cap.
    assert step(2.0, 20.0, gauges(waiting=2, running=64, kv=0.95)) is None
    assert step(3.5, 21.0, gauges(waiting=2, running=64, kv=0.95)) is None
    # Closed-loop clients: each new arrival waits one engine step, the queue empties in between.
    assert step(4.0, 30.0, gauges(waiting=1, running=12, kv=0.2)) is None
    assert step(4.5, 31.0, gauges(waiting=0, running=12, kv=0.2)) is None
    assert step(5.0, 32.0, gauges(waiting=1, running=12, kv=0.2)) is None
    assert step(5.5, 33.0, gauges(waiting=1, running=11, kv=0.2)) is None
    # Requests finish, waiting ones take their slots, and no more run, for a second: the cap.
    assert step(6.0, 40.0, gauges(waiting=3, running=32, kv=0.5)) is None
    assert step(6.5, 45.0, gauges(waiting=2, running=32, kv=0.5)) is None
    assert step(7.0, 50.0, gauges(waiting=4, running=32, kv=0.5)) == 32
    assert step(30.0, 50.0, gauges()) == 32  # kept while recent
    idle = w.update("p", 700.0, {"e2e": (50.0, 50.0)}, gauges())
    assert idle.running_cap == 32 and idle.cap_age_s == pytest.approx(693.0)  # kept, with its age:
    # the service model ages it toward the fallback (test_capacity_ages_slowly)
    # a "cap" the engine runs past was a plateau (e.g. prefill-bound): raised to what it ran
    assert step(701.0, 60.0, gauges(waiting=0, running=40, kv=0.4)) == 40


def test_derived_figures_fall_back_to_differences_of_phases() -> None:
    sglang_like = {
        "ttft": 0.5,
        "queue": 0.3,
        "e2e": 2.3,
        "itl": 0.02,
        "prompt_tokens": 400,
        "output_tokens": 90,
    }
    perf = derive_perf(sglang_like, None)
    assert perf.prefill_s == pytest.approx(0.2)
    assert perf.service_s == pytest.approx(2.0)
    assert perf.footprint_tokens == pytest.approx(490)
    vllm_like = {**sglang_like, "prefill": 0.15, "inference": 1.9}
    perf = derive_perf(vllm_like, 256)
    assert (perf.prefill_s, perf.service_s, perf.running_cap) == (0.15, 1.9, 256)


async def test_every_engine_format_yields_speed_figures_after_serving() -> None:
    formats = ("vllm", "sglang", "tgi")
    specs = [PodSpec(profile="tiny", model=MODEL, metrics_format=f) for f in formats]  # type: ignore[arg-type]
    async with SimFleet(specs) as sims, httpx.AsyncClient(timeout=10.0) as client:
        for url in sims.urls:
            for _ in range(2):
                r = await client.post(
                    f"{url}/v1/completions", json={"model": MODEL, "prompt": "x" * 400, "max_tokens": 8}
                )
                assert r.status_code == 200
        for fmt, url in zip(formats, sims.urls, strict=True):
            body = (await client.get(f"{url}/metrics")).content
            sample = read_pod_sample(body, None, time.monotonic(), perf=True)
            assert sample.metrics.engine == fmt
            perf = PerfWindow().update("p", 0.0, sample.perf, sample.metrics)
            assert perf.service_s is not None and perf.service_s > 0, fmt
            assert perf.itl_s is not None and perf.itl_s > 0, fmt
            assert perf.footprint_tokens == pytest.approx(100 + 8), fmt
            if fmt == "tgi":
                assert perf.prefill_s is None  # TGI exports no TTFT: the agent falls back
            else:
                assert perf.prefill_s is not None and perf.prefill_s > 0, fmt


async def test_a_simulated_pods_max_num_seqs_is_learned_from_its_metrics_under_load() -> None:
    spec = PodSpec(profile="tiny", model=MODEL, max_num_seqs=3, kv_capacity_tokens=4096)
    window = PerfWindow(cap_hold_s=0.5)
    async with SimFleet([spec]) as sims, httpx.AsyncClient(timeout=30.0) as client:
        url = sims.urls[0]
        load = asyncio.gather(
            *(
                client.post(
                    f"{url}/v1/completions", json={"model": MODEL, "prompt": "y" * 80, "max_tokens": 64}
                )
                for _ in range(16)
            )
        )
        cap, peak = None, 0
        deadline = time.monotonic() + 20.0
        while not load.done() and time.monotonic() < deadline:
            sample = read_pod_sample(
                (await client.get(f"{url}/metrics")).content, "vllm", time.monotonic(), perf=True
            )
            cap = window.update("p", time.monotonic(), sample.perf, sample.metrics).running_cap or cap
            peak = max(peak, sample.metrics.running)
            await asyncio.sleep(0.05)
        assert all(r.status_code == 200 for r in await load)
    assert peak == 3
    assert cap == 3
