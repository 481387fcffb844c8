"""The servers' HTTP layer alone: CPU per response with the head written with the body, and without.

`python -m bench.server_writes [--pairs 3] [--seconds 5]`: starts `common.asgi`'s server (uvicorn
with the guarded httptools protocol, as both tiers serve) in front of an app that answers a small
JSON completion at once, drives it with wrk at c64, and reads the server's CPU per response, in
alternating pairs: the server as it is (`HeadWithBody`: head and body in one write) and the same
server writing the head on its own (`--plain`, uvicorn's behaviour). Nothing else runs in the
server, so a difference of one send call per response is visible here, where in a whole row
(router, gateway, backend, wrk on 2 cores) it is inside the pair-to-pair noise.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from bench import procs, wrk
from bench.procstat import process_cpu_clock

BODY = json.dumps(
    {"id": "x", "object": "chat.completion", "choices": [{"index": 0, "message": {"content": "hello"}}]}
).encode()


class _Plain:
    """A transport pass-through: the head goes out on its own, as uvicorn writes it."""

    __slots__ = ("_t",)

    def __init__(self, transport: Any, loop: Any) -> None:
        self._t = transport

    def write(self, data: bytes) -> None:
        self._t.write(data)

    def close(self) -> None:
        self._t.close()

    def is_closing(self) -> bool:
        return bool(self._t.is_closing())


async def _app(scope: dict[str, Any], receive: Any, send: Any) -> None:
    if scope["type"] != "http":
        return
    while (await receive()).get("more_body"):
        pass
    headers = [(b"content-type", b"application/json"), (b"content-length", str(len(BODY)).encode())]
    await send({"type": "http.response.start", "status": 200, "headers": headers})
    await send({"type": "http.response.body", "body": BODY})


def serve(plain: bool) -> None:
    """The server process: prints its port, serves until killed."""
    import logging

    import uvloop

    import common.http_server as http_server
    from common.asgi import EmbeddedServer, listen_socket, server_config
    from common.config.server import HttpServer

    if plain:
        http_server.HeadWithBody = _Plain  # type: ignore[misc, assignment]

    async def main() -> None:
        srv = EmbeddedServer(server_config(_app, HttpServer()))
        port = await srv.start_on(listen_socket("127.0.0.1", 0))
        print(f"listening on {port}", flush=True)
        await asyncio.Event().wait()

    logging.basicConfig(level=logging.WARNING)
    uvloop.run(main())


def measure(plain: bool, seconds: float, script: Path) -> dict[str, float]:
    cmd = [sys.executable, "-m", "bench.server_writes", "--serve"] + (["--plain"] if plain else [])
    proc = subprocess.Popen(cmd, cwd=procs.ROOT, stdout=subprocess.PIPE, text=True)
    try:
        (port,) = procs.expect(proc.stdout, r"listening on (\d+)", 1)
        url = f"http://127.0.0.1:{port}/v1/chat/completions"
        wrk.run(url, script, 64, 1)  # warm-up
        cpu0 = process_cpu_clock(proc.pid)
        res = wrk.run(url, script, 64, seconds)
        cpu = process_cpu_clock(proc.pid) - cpu0
    finally:
        procs.stop(proc)
    if res.errors:
        raise RuntimeError(f"{res.errors} errors from wrk")
    return {"rps": res.ok_rps, "us_per_response": cpu / max(1, res.requests) * 1e6}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.server_writes", description=__doc__.split("\n")[0])
    ap.add_argument("--pairs", type=int, default=3)
    ap.add_argument("--seconds", type=float, default=5.0)
    ap.add_argument("--serve", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--plain", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.serve:
        serve(args.plain)
        return 0
    wrk.ensure_installed()
    with tempfile.TemporaryDirectory() as tmp:
        script = Path(tmp) / "post.lua"
        script.write_text(wrk.lua_script({"model": "m", "messages": []}))
        rows: dict[str, list[dict[str, float]]] = {"head with body": [], "head alone": []}
        for _ in range(args.pairs):
            rows["head alone"].append(measure(True, args.seconds, script))
            rows["head with body"].append(measure(False, args.seconds, script))
    for name, runs in rows.items():
        us = [r["us_per_response"] for r in runs]
        rps = [r["rps"] for r in runs]
        print(
            f"{name}: {statistics.median(us):.1f} us CPU per response (runs {', '.join(f'{u:.1f}' for u in us)}), "
            f"{statistics.median(rps):,.0f} req/s"
        )
    return 0


if __name__ == "__main__":
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    sys.exit(main())
