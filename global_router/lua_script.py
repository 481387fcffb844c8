"""A Lua script shipped with the package: loaded once per server, run by EVALSHA, reloaded on NOSCRIPT.

Redis forgets scripts on restart or SCRIPT FLUSH; the NOSCRIPT fallback makes that invisible.
"""

from __future__ import annotations

import hashlib
from importlib import resources
from typing import Any

import redis.asyncio as aioredis
from redis.exceptions import NoScriptError


class LuaScript:
    def __init__(self, name: str) -> None:
        self.name = name
        self.source = resources.files("global_router").joinpath("lua", f"{name}.lua").read_text()
        self.sha = hashlib.sha1(self.source.encode()).hexdigest()

    async def load(self, client: aioredis.Redis) -> None:
        await client.script_load(self.source)

    async def __call__(self, client: aioredis.Redis, keys: list[str], args: list[Any]) -> Any:
        try:
            return await client.evalsha(self.sha, len(keys), *keys, *args)
        except NoScriptError:
            await self.load(client)
            return await client.evalsha(self.sha, len(keys), *keys, *args)
