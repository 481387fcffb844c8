"""A Lua script shipped with the package: loaded once per server, run by EVALSHA, reloaded on NOSCRIPT.

Redis forgets scripts on restart or SCRIPT FLUSH; the NOSCRIPT fallback makes that invisible.
A Redis script cannot `require` another, so steps two scripts share live in a fragment of their own
that each pastes with a `--#include <name>` line (expanded here, once, when the script is read).
"""

from __future__ import annotations

import hashlib
from importlib import resources
from typing import Any

import redis.asyncio as aioredis
from redis.exceptions import NoScriptError

_INCLUDE = "--#include "


def _read(name: str) -> str:
    return resources.files("global_router").joinpath("lua", f"{name}.lua").read_text()


def script_source(name: str) -> str:
    """The text of `lua/<name>.lua` with its `--#include <fragment>` lines replaced by the fragments."""
    return "".join(
        _read(line.removeprefix(_INCLUDE).strip()) if line.startswith(_INCLUDE) else line
        for line in _read(name).splitlines(keepends=True)
    )


class LuaScript:
    def __init__(self, name: str) -> None:
        self.name = name
        self.source = script_source(name)
        self.sha = hashlib.sha1(self.source.encode()).hexdigest()

    async def load(self, client: aioredis.Redis) -> None:
        await client.script_load(self.source)

    async def __call__(self, client: aioredis.Redis, keys: list[str], args: list[Any]) -> Any:
        try:
            return await client.evalsha(self.sha, len(keys), *keys, *args)
        except NoScriptError:
            await self.load(client)
            return await client.evalsha(self.sha, len(keys), *keys, *args)
