"""The plugin that owns the approximate prefix index; the prefix scorers read it through the handle."""

from __future__ import annotations

from collections.abc import Mapping
from itertools import islice
from typing import Any

from cluster_gateway.pool import PodState
from cluster_gateway.scheduling.plugin import PluginBase, SchedulingHandle
from cluster_gateway.scheduling.prefix_index import PrefixIndex
from cluster_gateway.scheduling.types import LLMRequest, SchedulingContext
from common.config import ConfigError
from common.plugins import param


class PrefixIndexPlugin(PluginBase):
    """Where this gateway sent each prompt prefix (the approximate prefix index); scores nothing itself.

    An LRU set of block hashes per pod, updated on every dispatch and pruned when pods leave, within
    a byte budget over all pods; `prefix` and `prefix_raw` read it (one shared instance, so a
    dispatch is recorded once). A LoRA adapter's prompts are hashed in the adapter's own namespace,
    as the engines cache them.

    Params: `blockChars`, `maxBlocksPerPod`, `maxPrefixBlocks`, `maxBytes` (defaults:
    `scheduling.prefixCache`).
    """

    def __init__(self, name: str, params: Mapping[str, Any], handle: SchedulingHandle) -> None:
        super().__init__(name, params, handle)
        pc = handle.config.prefix_cache
        where = f"scheduling.plugins.{name}"
        self.block_chars: int = param(params, "blockChars", pc.block_chars, int, where)
        self.max_prefix_blocks: int = param(params, "maxPrefixBlocks", pc.max_prefix_blocks, int, where)
        per_pod: int = param(params, "maxBlocksPerPod", pc.max_blocks_per_pod, int, where)
        max_bytes: int = param(params, "maxBytes", pc.max_bytes, int, where)
        if self.block_chars < 4 or self.max_prefix_blocks < 1 or per_pod < 1 or max_bytes < 1 << 20:
            raise ConfigError(
                f"field `{where}.params`: blockChars >= 4, maxPrefixBlocks and maxBlocksPerPod >= 1, "
                "maxBytes >= 1048576"
            )
        self.index = PrefixIndex.for_bytes(max_bytes, per_pod)
        self._catalog = handle.pool.catalog
        self._memo_key = f"prefix_matches:{name}"

    def block_hashes(self, req: LLMRequest) -> tuple[int, ...]:
        """The prompt's chain, in the adapter's own namespace when the model is one some pod lists as
        a LoRA adapter (its blocks are cached apart from the base model's)."""
        adapter = self._catalog.is_adapter(req.model)
        return req.block_hashes(self.block_chars, self.max_prefix_blocks, adapter)

    def matches(self, ctx: SchedulingContext) -> dict[str, int]:
        """Matched blocks per pod for this decision's prompt, looked up once per decision."""
        m: dict[str, int] | None = ctx.request_memo.get(self._memo_key)
        if m is None:
            m = ctx.request_memo[self._memo_key] = self.index.match(self.block_hashes(ctx.request))
        return m

    def nominate(self, ctx: SchedulingContext, limit: int) -> list[str]:
        """For a two-stage pick: the `limit` pods holding the longest cached prefix of the prompt."""
        m = self.matches(ctx)
        if len(m) <= limit:
            return list(m)
        return list(islice(reversed(m), limit))  # `match` puts the longest last

    def on_dispatch(self, req: LLMRequest, pod: PodState) -> None:
        """From now on that pod likely caches the prompt's blocks."""
        hashes = self.block_hashes(req)
        if hashes:
            self.index.add(pod.name, hashes)

    def on_pods_changed(self, pods: list[PodState]) -> None:
        self.index.retain_pods({p.name for p in pods})


def prefix_index_of(handle: SchedulingHandle, params: Mapping[str, Any], name: str) -> PrefixIndexPlugin:
    """The index plugin a prefix scorer reads: param `index` (default `prefix_index`)."""
    where = f"scheduling.plugins.{name}"
    ref: str = param(params, "index", "prefix_index", str, where)
    plugin = handle.plugin(ref)
    if not isinstance(plugin, PrefixIndexPlugin):
        raise ConfigError(f"field `{where}.params.index`: plugin {ref!r} is not a prefix index")
    return plugin
