"""The relay's control channel: one JSON object per line on a Unix socket, one JSON answer per line.

A Unix socket because the test (or demo) that drives the links runs outside the network namespaces
the relay serves: a filesystem path reaches into a namespace where no TCP address of the host does.

Operations (`op`), each answered `{"ok": true, ...}` or `{"ok": false, "error": "..."}`:
- `add`      name, listen, targets, [policy, latency_ms, jitter_ms, loss, partition] -> bound address
- `set`      name, any of latency_ms / jitter_ms / loss / partition -> the link's impairment now
- `targets`  name, targets  (new connections only; live ones drain on their old target)
- `reset`    name -> how many live connections were aborted
- `stats`    [name] -> counters of one link or of all
- `remove`   name
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import socket
from dataclasses import asdict
from typing import Any

from common.wanrelay.link import Impairment, Link

_IMPAIRMENT_FIELDS = set(Impairment.__dataclass_fields__)


class Relays:
    """The links one relay process hosts, by name."""

    def __init__(self) -> None:
        self.links: dict[str, Link] = {}

    async def handle(self, req: dict[str, Any]) -> dict[str, Any]:
        op = req.get("op")
        name = req.get("name")
        if op == "add":
            if not isinstance(name, str) or not name:
                raise ValueError("add: `name` is required")
            if name in self.links:
                raise ValueError(f"add: link {name!r} exists")
            imp = Impairment(**{k: v for k, v in req.items() if k in _IMPAIRMENT_FIELDS})
            link = Link(
                name,
                str(req["listen"]),
                list(req.get("targets", [])),
                policy=req.get("policy", "first"),
                impairment=imp,
                connect_timeout_s=float(req.get("connect_timeout_s", 2.0)),
            )
            bound = await link.start()
            self.links[name] = link
            return {"listen": bound}
        if op == "stats" and name is None:
            return {"links": {n: asdict(link.stats) for n, link in self.links.items()}}
        link = self._link(name)
        if op == "set":
            changes = {k: v for k, v in req.items() if k not in ("op", "name")}
            return {"impairment": asdict(link.configure(**changes))}
        if op == "targets":
            link.set_targets(list(req["targets"]))
            return {"targets": link.targets}
        if op == "reset":
            return {"aborted": link.reset()}
        if op == "stats":
            return {"stats": asdict(link.stats), "impairment": asdict(link.impairment)}
        if op == "remove":
            await link.stop()
            del self.links[link.name]
            return {}
        raise ValueError(f"unknown op {op!r}")

    def _link(self, name: object) -> Link:
        if not isinstance(name, str) or name not in self.links:
            raise ValueError(f"no link named {name!r}")
        return self.links[name]

    async def close(self) -> None:
        for link in self.links.values():
            await link.stop()
        self.links.clear()


async def serve_control(relays: Relays, path: str) -> asyncio.Server:
    async def session(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while line := await reader.readline():
                try:
                    req = json.loads(line)
                    if not isinstance(req, dict):
                        raise ValueError("a request is a JSON object")
                    answer = {"ok": True, **(await relays.handle(req))}
                except (ValueError, KeyError, TypeError, OSError) as exc:
                    answer = {"ok": False, "error": f"{type(exc).__name__}: {exc}"}
                writer.write(json.dumps(answer).encode() + b"\n")
                await writer.drain()
        finally:
            writer.close()
            with contextlib.suppress(OSError):
                await writer.wait_closed()

    return await asyncio.start_unix_server(session, path)


class RelayError(RuntimeError):
    """The relay refused a control request; the message is the relay's."""


class ControlClient:
    """Blocking client for the control socket (a test drives links between its own awaits)."""

    def __init__(self, path: str, timeout_s: float = 5.0) -> None:
        self.path = path
        self.timeout_s = timeout_s

    def call(self, op: str, **fields: Any) -> dict[str, Any]:
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
            s.settimeout(self.timeout_s)
            s.connect(self.path)
            s.sendall(json.dumps({"op": op, **fields}).encode() + b"\n")
            buf = b""
            while not buf.endswith(b"\n"):
                chunk = s.recv(65536)
                if not chunk:
                    raise RelayError(f"relay closed the control connection during {op!r}")
                buf += chunk
        answer: dict[str, Any] = json.loads(buf)
        if not answer.pop("ok", False):
            raise RelayError(str(answer.get("error")))
        return answer
