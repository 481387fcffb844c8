"""Precise prefix-cache routing: the engines' KV-cache events (vLLM `--kv-events-config`) → a per-pod
block index → the `precise_prefix` scorer, with the approximate prefix index as its fallback."""
