"""`python -m fleetgate demo` as a newcomer runs it: endpoint and key first, real OpenAI traffic through
three clusters, a live summary, and a stop (signal or a dead child) that leaves nothing running."""

from __future__ import annotations

import os
import re
import signal
import socket
import time
from pathlib import Path
from urllib.parse import urlsplit

import httpx
import openai
import pytest

from fleetgate.demo_fleet import BASE_MODEL, DEFAULT_FLEET
from tests.fleetgate.demo_process import ENDPOINT_LINE, KEY_LINE, DemoProcess, wait_gone
from tests.procs import RedisServer

pytestmark = pytest.mark.timeout(150)

CLUSTERS = {c.cluster_id: len(c.pods) for c in DEFAULT_FLEET}
START_S = 90.0  # three simulator processes + gateways + router on a busy 2-core machine
STOP_S = 30.0


def _closed(url: str) -> bool:
    parts = urlsplit(url)
    try:
        with socket.create_connection((parts.hostname, parts.port), timeout=1):
            return False
    except OSError:
        return True


def _started(demo: DemoProcess) -> tuple[str, str]:
    first = demo.next_line(START_S)
    m = ENDPOINT_LINE.match(first)
    assert m, f"first line {first!r}"
    k = KEY_LINE.match(demo.next_line(5))
    assert k, demo.seen
    return m.group(1), k.group(1)


DIRECT_EXAMPLE = r"curl -si \S+/v1/chat/completions -H"


def _admin_headers(demo: DemoProcess) -> dict[str, str]:
    """`/fleet` shows gateway URLs only with the admin key, which the demo prints in its header."""
    line = next((ln for ln in demo.seen if ln.startswith("admin key: ")), None) or demo.wait_for_line(
        r"^admin key: ", 5
    )
    return {"authorization": f"Bearer {line.split()[2]}"}


def test_demo_routes_openai_traffic_and_load_and_sigterm_stops_everything(tmp_path: Path) -> None:
    demo = DemoProcess(
        "--duration", "40", "--port", "0", "--summary-every", "2", "--load", "--load-rps", "4", tmp=tmp_path
    )
    try:
        url, key = _started(demo)
        sims = demo.sim_children()
        assert set(sims) == set(CLUSTERS), sims

        client = openai.OpenAI(base_url=f"{url}/v1", api_key=key, max_retries=0, timeout=30)
        ids = {m.id for m in client.models.list().data}
        assert {BASE_MODEL, "sql-lora", "support-lora", "summarize-lora"} <= ids

        raw = client.chat.completions.with_raw_response.create(
            model=BASE_MODEL, messages=[{"role": "user", "content": "Hello!"}], max_tokens=16
        )
        chat = raw.parse()
        assert chat.choices[0].message.content
        assert chat.usage is not None and chat.usage.completion_tokens > 0
        assert raw.headers["x-fleetgate-cluster"] in CLUSTERS

        stream = client.chat.completions.create(
            model=BASE_MODEL,
            messages=[{"role": "user", "content": "Tell me a story"}],
            max_tokens=24,
            stream=True,
            stream_options={"include_usage": True},
        )
        chunks = list(stream)
        text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
        assert text and len([c for c in chunks if c.choices]) > 2
        assert chunks[-1].usage is not None and chunks[-1].usage.completion_tokens > 0

        # sql-lora lives only in us-east-1 and eu-west-1: the router must send it there.
        raw = client.chat.completions.with_raw_response.create(
            model="sql-lora", messages=[{"role": "user", "content": "Top customers"}], max_tokens=12
        )
        assert raw.parse().choices[0].message.content
        assert raw.headers["x-fleetgate-cluster"] in {"us-east-1", "eu-west-1"}

        with pytest.raises(openai.AuthenticationError):
            openai.OpenAI(base_url=f"{url}/v1", api_key="sk-wrong", max_retries=0).models.list()

        public = httpx.get(f"{url}/fleet", timeout=5).json()  # the public view: no internal URLs
        assert public["clusters"] and all("gateway_url" not in c for c in public["clusters"])
        fleet = httpx.get(f"{url}/fleet", headers=_admin_headers(demo), timeout=5).json()
        by_id = {c["id"]: c for c in fleet["clusters"]}
        assert set(by_id) == set(CLUSTERS)
        for cid, c in by_id.items():
            assert c["fresh"], c
            assert c["models"][BASE_MODEL]["ready_pods"] == CLUSTERS[cid], c
        assert sum(c["requests_total"] for c in by_id.values()) >= 3
        gateways = [c["gateway_url"] for c in by_id.values()]
        # the printed example: straight to a gateway, bypassing the router, is refused with 401
        example = next((ln for ln in demo.seen if re.search(DIRECT_EXAMPLE, ln)), None) or demo.wait_for_line(
            DIRECT_EXAMPLE, 5
        )
        direct_url = example.split()[2]
        assert direct_url.removesuffix("/v1/chat/completions") in gateways
        body = {"model": BASE_MODEL, "messages": [{"role": "user", "content": "Hello!"}], "max_tokens": 8}
        direct = httpx.post(direct_url, json=body, timeout=10)
        assert direct.status_code == 401 and direct.json()["error"]["code"] == "invalid_api_key"
        direct = httpx.post(direct_url, json=body, headers={"authorization": f"Bearer {key}"}, timeout=10)
        assert direct.status_code == 401  # the router's API key is not a gateway credential

        # Not a TTY: compact summary lines, every pod counted.
        line = demo.wait_for_line(r"us-east-1 \d/3 ready", 15)
        assert "eu-west-1" in line and "ap-south-1" in line and "pod requests=" in line
        # --load: its own traffic mix gets answers through the global endpoint.
        line = demo.wait_for_line(r"load 4 req/s: sent \d+ ok [1-9]", 20)
        assert "served by" in line

        t0 = time.monotonic()
        assert demo.stop(signal.SIGTERM, STOP_S) == 0, demo.stderr()
        stop_s = time.monotonic() - t0
        assert stop_s < STOP_S
        assert wait_gone(list(sims.values()), 10) == [], "simulator processes left running"
        assert all(_closed(u) for u in [url, *gateways]), "a server still listens after the demo exited"
        assert key not in demo.stderr()  # keys are printed once on stdout, never logged
    finally:
        demo.kill_all()


def test_a_child_that_dies_is_named_and_the_demo_exits_nonzero(tmp_path: Path) -> None:
    demo = DemoProcess("--duration", "40", "--port", "0", "--no-live", tmp=tmp_path)
    try:
        _started(demo)
        sims = demo.sim_children()
        assert set(sims) == set(CLUSTERS), sims
        os.kill(sims["eu-west-1"], signal.SIGKILL)
        assert demo.wait(STOP_S) == 1
        err = demo.stderr()
        assert "eu-west-1" in err and "SIGKILL" in err, err
        assert wait_gone(list(sims.values()), 10) == []
    finally:
        demo.kill_all()


def test_sigint_with_no_live_and_redis_prints_only_the_header_and_exits_zero(
    tmp_path: Path, redis_server: RedisServer
) -> None:
    demo = DemoProcess(
        "--duration", "40", "--port", "0", "--no-live", "--redis", redis_server.url, tmp=tmp_path
    )
    try:
        url, _ = _started(demo)
        sims = demo.sim_children()
        fleet = httpx.get(f"{url}/fleet", headers=_admin_headers(demo), timeout=5).json()
        assert fleet["router"]["fleet_view"] == "redis"
        assert {c["id"] for c in fleet["clusters"] if c["fresh"]} == set(CLUSTERS)
        time.sleep(2.5)  # a summary line would be due by now without --no-live
        assert demo.stop(signal.SIGINT, STOP_S) == 0, demo.stderr()
        assert demo.proc.stdout is not None
        while demo.lines.get(timeout=5) is not None:
            pass
        rest = [ln for ln in demo.seen if ln.startswith("[")]
        assert rest == []
        assert wait_gone(list(sims.values()), 10) == []
        assert _closed(url)
    finally:
        demo.kill_all()
