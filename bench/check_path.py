"""The ext_authz check's own Python cost, without its HTTP exchange: µs per check + release.

Envoy's callout costs the gateway its HTTP/1.1 exchange (parse, write, loop wake-ups) plus this:
the header decode, the credential check, the request parse, the pick (admission, scheduling), the
ledger entry, the answer's headers and, when Envoy's access log reports the end, the release. The
row-level A/B (`python -m bench.row_cpu envoy-authz`) is noisier than most trims of this part, so it
is timed here alone, in process, with the headers Envoy sends and the throughput bench's body.

    python -m bench.check_path [--pods 4] [--checks 30000] [--rounds 3]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import time
from collections.abc import Sequence

from cluster_gateway.data_plane import DataPlane
from cluster_gateway.envoy_front.contract import CHECK_PREFIX, PICK_HEADER
from cluster_gateway.observability import GatewayMetrics
from cluster_gateway.pool import Endpoint, EndpointPool, PodMetrics
from common.config.gateway import GatewaySpec
from common.config.loader import load_config_data

MODEL = "static-model"
PATH = CHECK_PREFIX + "/v1/chat/completions"
_PICK = PICK_HEADER.encode()


def plane(pods: int) -> DataPlane:
    spec = load_config_data(
        {"discovery": {"static": {"endpoints": []}}, "extAuthz": {"enabled": True}},
        GatewaySpec,
        source="bench",
    )
    pool = EndpointPool()
    for i in range(pods):
        name = f"pod-{i}"
        pool.upsert(Endpoint(name=name, address="127.0.0.1", port=9000 + i, engine="vllm"))
        pool.set_models(name, [MODEL])
        pool.record_scrape(
            name, PodMetrics(engine="vllm", waiting=0, running=1, kv_usage=0.1, scraped_at=time.monotonic())
        )
    return DataPlane(spec, pool, GatewayMetrics())


def envoy_headers(body: bytes) -> list[tuple[bytes, bytes]]:
    """What Envoy's ext_authz filter sends for a wrk request (lower-case, as on the wire)."""
    return [
        (b"host", b"127.0.0.1:10000"),
        (b"user-agent", b"wrk"),
        (b"content-type", b"application/json"),
        (b"content-length", str(len(body)).encode()),
        (b"x-forwarded-proto", b"http"),
        (b"x-request-id", b"5f0c6c1e-7f7e-4a6e-9a0e-2f6d1c0b7a11"),
        (b"x-envoy-expected-rq-timeout-ms", b"600000"),
        (b"x-envoy-internal", b"true"),
        (b"x-forwarded-for", b"127.0.0.1"),
    ]


async def checks(p: DataPlane, n: int, body: bytes) -> float:
    """Seconds for `n` checks, each released at once as the access log would."""
    check, releases = p.check, p.releases
    assert check is not None and releases is not None
    headers = envoy_headers(body)
    t0 = time.perf_counter()
    for _ in range(n):
        answer = await check.answer("POST", PATH, headers, body)
        if answer.status != 200:
            raise SystemExit(f"check answered {answer.status}: {answer.body!r}")
        releases.route(next(v for k, v in answer.headers if k == _PICK).decode(), 200)
    return time.perf_counter() - t0


async def run(pods: int, n: int, rounds: int) -> list[float]:
    p = plane(pods)
    body = json.dumps(
        {"model": MODEL, "messages": [{"role": "user", "content": "ping"}], "max_tokens": 1, "stream": False}
    ).encode()
    await checks(p, n, body)  # warm: the first pass fills the prefix index and the ledger
    return [await checks(p, n, body) / n * 1e6 for _ in range(rounds)]


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.check_path", description=__doc__.split("\n")[0])
    ap.add_argument("--pods", type=int, default=4)
    ap.add_argument("--checks", type=int, default=30_000)
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args(argv)
    per = asyncio.run(run(args.pods, args.checks, args.rounds))
    rounds = " ".join(f"{x:.1f}" for x in per)
    print(f"{args.pods} pods: {statistics.median(per):.1f} µs per check + release (median; rounds {rounds})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
