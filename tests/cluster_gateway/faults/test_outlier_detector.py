"""Outlier detection on its own, with an injected clock: what ejects a pod, for how long, how many."""

from __future__ import annotations

from cluster_gateway.pool import Endpoint, EndpointPool, PodState
from cluster_gateway.request_path.outliers import PROBE_EVERY_S, SHED_PROBE_EVERY_S, OutlierDetector
from common.config.gateway import OutlierDetection


class Clock:
    def __init__(self) -> None:
        self.t = 1000.0

    def __call__(self) -> float:
        return self.t


def _pool(n: int) -> tuple[EndpointPool, list[PodState]]:
    pool = EndpointPool()
    pool.set_endpoints(Endpoint(name=f"p{i}", address="127.0.0.1", port=9000 + i) for i in range(n))
    pods = [pool.get(f"p{i}") for i in range(n)]
    assert all(p is not None for p in pods)
    return pool, [p for p in pods if p is not None]


def test_five_consecutive_5xx_eject_and_a_success_in_between_resets_the_count() -> None:
    clock = Clock()
    pool, (a, _b, _c) = _pool(3)
    events: list[tuple[str, str, float]] = []
    od = OutlierDetector(pool, OutlierDetection(), clock=clock, on_eject=lambda *e: events.append(e))
    for _ in range(4):
        od.failure(a, gateway=False)
    od.success(a)
    for _ in range(4):
        od.failure(a, gateway=False)
    assert od.ejected() == []
    od.failure(a, gateway=False)
    assert od.ejected() == ["p0"]
    assert events == [("p0", "consecutive_5xx", 30.0)]
    assert a.ejected_until == clock.t + 30.0


def test_gateway_failures_count_separately_from_5xx() -> None:
    clock = Clock()
    pool, (a, _b, _c) = _pool(3)
    od = OutlierDetector(pool, OutlierDetection(consecutive_gateway_failures=2), clock=clock)
    od.failure(a, gateway=True)
    od.failure(a, gateway=False)
    assert od.ejected() == []
    od.failure(a, gateway=True)
    assert od.ejected() == ["p0"]


def test_ejection_grows_with_repeats_up_to_the_maximum_and_a_probe_success_resets_it() -> None:
    clock = Clock()
    pool, (a, _b, _c) = _pool(3)
    cfg = OutlierDetection(base_ejection_time_s=10, max_ejection_time_s=25)
    od = OutlierDetector(pool, cfg, clock=clock)
    lengths = []
    for _ in range(4):
        for _ in range(5):
            od.failure(a, gateway=False)
        lengths.append(a.ejected_until - clock.t)
        clock.t = a.ejected_until  # the ejection ends; the probe fails again
    assert lengths == [10, 20, 25, 25]
    od.success(a)  # the probe after the last ejection answers
    for _ in range(5):
        od.failure(a, gateway=False)
    assert a.ejected_until - clock.t == 10


def test_never_more_than_max_ejection_percent_of_the_pool_is_out() -> None:
    clock = Clock()
    pool, pods = _pool(4)
    od = OutlierDetector(pool, OutlierDetection(max_ejection_percent=50), clock=clock)
    for p in pods:
        for _ in range(5):
            od.failure(p, gateway=False)
    assert od.ejected() == ["p0", "p1"]
    # at least one pod may always be ejected, even where the share rounds to zero
    pool1, (solo,) = _pool(1)
    od1 = OutlierDetector(pool1, OutlierDetection(max_ejection_percent=10), clock=clock)
    for _ in range(5):
        od1.failure(solo, gateway=False)
    assert od1.ejected() == ["p0"]
    off = OutlierDetector(pool1, OutlierDetection(max_ejection_percent=0), clock=clock)
    solo.ejected_until = 0.0
    for _ in range(5):
        off.failure(solo, gateway=False)
    assert off.ejected() == []


def test_failure_percentage_over_an_interval_ejects_an_intermittent_pod() -> None:
    clock = Clock()
    pool, (a, _b, _c) = _pool(3)
    cfg = OutlierDetection(failure_percentage_threshold=50, failure_percentage_min_requests=20)
    od = OutlierDetector(pool, cfg, clock=clock)
    for i in range(19):  # alternate: never 5 in a row, but 50% fail
        if i % 2:
            od.failure(a, gateway=False)
        else:
            od.success(a)
        clock.t += 0.1
    assert od.ejected() == []
    od.failure(a, gateway=False)  # the 20th request of the interval, 10 of 20 failed
    assert od.ejected() == ["p0"]
    # the same share spread over more than one interval never reaches the minimum volume
    pool2, (b, _x, _y) = _pool(3)
    od2 = OutlierDetector(pool2, cfg, clock=clock)
    for i in range(40):
        if i % 2:
            od2.failure(b, gateway=False)
        else:
            od2.success(b)
        clock.t += 1.0  # 10 requests per 10 s interval
    assert od2.ejected() == []


def test_rank_puts_recent_failures_behind_and_ejected_pods_last_then_forgives() -> None:
    clock = Clock()
    pool, (a, b, c) = _pool(3)
    od = OutlierDetector(pool, OutlierDetection(), clock=clock)
    assert od.rank([a, b, c]) == [a, b, c]
    od.failure(a, gateway=False)  # one fast failure: no longer the first choice
    assert od.rank([a, b, c]) == [b, c, a]
    for _ in range(5):
        od.failure(b, gateway=False)
    assert od.rank([a, b, c]) == [c, a, b]  # b ejected: last
    clock.t += 30.0  # b's ejection ends; a's single failure has decayed (5 s half-life)
    assert od.rank([a, b, c])[0] is a


def test_disabled_detection_neither_ejects_nor_penalises() -> None:
    clock = Clock()
    pool, (a, b, _c) = _pool(3)
    od = OutlierDetector(pool, OutlierDetection(enabled=False), clock=clock)
    for _ in range(50):
        od.failure(a, gateway=False)
    assert od.ejected() == []
    assert od.rank([a, b]) == [a, b]


def test_departed_pods_are_forgotten() -> None:
    clock = Clock()
    pool, (a, _b, _c) = _pool(3)
    od = OutlierDetector(pool, OutlierDetection(), clock=clock)
    for _ in range(4):
        od.failure(a, gateway=False)
    pool.remove("p0")
    od.forget_departed()
    pool.set_endpoints(Endpoint(name=f"p{i}", address="127.0.0.1", port=9000 + i) for i in range(3))
    fresh = pool.get("p0")
    assert fresh is not None
    od.failure(fresh, gateway=False)  # the old streak of 4 is gone
    assert od.ejected() == []


def test_a_demoted_pod_is_probed_so_the_penalty_cannot_shield_it_from_ejection() -> None:
    clock = Clock()
    pool, (a, b, c) = _pool(3)
    od = OutlierDetector(pool, OutlierDetection(), clock=clock)
    od.failure(a, gateway=False)
    assert od.rank([a, b, c])[0] is b
    clock.t += PROBE_EVERY_S + 1e-6
    assert od.rank([a, b, c])[0] is a  # its probe
    assert od.rank([a, b, c])[0] is b  # only one per interval
    for _ in range(4):  # every probe fails: five in a row eject it, a few probe intervals in
        clock.t += PROBE_EVERY_S + 1e-6
        assert od.rank([a, b, c])[0] is a
        od.failure(a, gateway=False)
    assert od.ejected() == ["p0"]


def test_a_success_clears_the_penalty() -> None:
    clock = Clock()
    pool, (a, b, _c) = _pool(3)
    od = OutlierDetector(pool, OutlierDetection(), clock=clock)
    od.failure(a, gateway=False)
    od.success(a)
    assert od.rank([a, b]) == [a, b]


def test_429_demotes_but_never_ejects() -> None:
    clock = Clock()
    pool, (a, b, _c) = _pool(3)
    od = OutlierDetector(pool, OutlierDetection(), clock=clock)
    for _ in range(50):
        od.shed(a)
    assert od.ejected() == []
    assert od.rank([a, b]) == [b, a]
    clock.t += SHED_PROBE_EVERY_S / 2
    assert od.rank([a, b]) == [b, a]  # probed far less often than a pod on its way out
    clock.t += SHED_PROBE_EVERY_S / 2
    assert od.rank([a, b]) == [a, b]  # its probe
    assert od.rank([a, b]) == [b, a]
    od.success(a)  # it takes work again: back in its place at once
    assert od.rank([a, b]) == [a, b]
