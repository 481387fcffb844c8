"""Shared Lua steps are pasted, not copied: admit.lua and settle.lua both carry settle_steps.lua once."""

from __future__ import annotations

from global_router.lua_script import LuaScript, script_source


def test_scripts_carry_their_fragments_and_no_include_line() -> None:
    fragment = script_source("settle_steps")
    for name in ("admit", "settle"):
        source = LuaScript(name).source
        assert source.count(fragment) == 1
        assert not any(line.startswith("--#include") for line in source.splitlines())
