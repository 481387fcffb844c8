"""Envoy mode shares outlier detection: pods whose answers (as Envoy relays them) fail are ejected
from the picker's choices, 429s only demote them."""

from __future__ import annotations

import time
from collections.abc import Callable

from envoy.config.core.v3 import base_pb2
from envoy.service.ext_proc.v3 import external_processor_pb2 as pb

from cluster_gateway.request_path.outliers import PROBE_EVERY_S, OutlierDetector
from common.config.gateway import OutlierDetection

from .conftest import Picker
from .test_picker_protocol import DEST, Envoyish, body_msgs, chat_body, headers_msg, set_headers

IDLE = "127.0.0.1:9002"  # the scheduler's favourite in the `picker` fixture's pool


async def exchange(picker: Picker, status_for: Callable[[str], int]) -> str:
    """One request through the picker; the chosen pod answers `status_for(ip:port)`."""
    env = Envoyish(picker.target)
    try:
        env.send([headers_msg("/v1/chat/completions"), *body_msgs(chat_body())])
        first = (await env.recv(1))[0]
        dest = set_headers(first.request_headers.response)[DEST]
        while not (await env.recv(1))[0].request_body.response.body_mutation.streamed_response.end_of_stream:
            pass
        status = str(status_for(dest)).encode()
        hm = base_pb2.HeaderMap(headers=[base_pb2.HeaderValue(key=":status", raw_value=status)])
        env.send([pb.ProcessingRequest(response_headers=pb.HttpHeaders(headers=hm, end_of_stream=True))])
        await env.recv(1)
    finally:
        await env.close()
    return dest


def idle_answers(status: int) -> Callable[[str], int]:
    return lambda dest: status if dest == IDLE else 200


class Clock:
    def __init__(self) -> None:
        self.t = time.monotonic()

    def __call__(self) -> float:
        return self.t


def manual_clock(picker: Picker) -> Clock:
    """The picker's outlier detector on a clock the test moves (no wall-clock races)."""
    clock = Clock()
    picker.service.outliers = OutlierDetector(picker.pool, OutlierDetection(), clock=clock)
    return clock


async def test_a_pod_answering_5xx_behind_envoy_is_ejected_from_the_picks(picker: Picker) -> None:
    clock = manual_clock(picker)
    hits = 0
    for _ in range(50):
        if picker.service.outliers.ejected():
            break
        hits += await exchange(picker, idle_answers(500)) == IDLE
        clock.t += PROBE_EVERY_S / 2  # demoted, it is probed every other request
    assert hits == 5  # five 5xx in a row, no more
    assert picker.service.outliers.ejected() == ["idle"]
    for _ in range(5):
        assert await exchange(picker, idle_answers(200)) != IDLE


async def test_429_behind_envoy_demotes_but_never_ejects(picker: Picker) -> None:
    manual_clock(picker)
    assert await exchange(picker, idle_answers(429)) == IDLE
    for _ in range(5):  # behind the others while the penalty lasts (the clock does not move)
        assert await exchange(picker, idle_answers(200)) != IDLE
    assert picker.service.outliers.ejected() == []
