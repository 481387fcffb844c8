"""The simulated engine: vLLM-style continuous batching in real time on the event loop.

One task per pod runs the step loop. Each step schedules (like vLLM v1's unified scheduler) up to
`max_num_batched_tokens` tokens: first every running request (one decode token, or the next chunk of
an unfinished prefill), preempting the newest running request when the KV pool cannot grow; then,
if nothing was preempted, waiting requests in FCFS order, each starting after its prefix-cache hit.
The step then lasts as long as the profile's roofline says for that batch, and afterwards every
request whose known tokens are all computed samples one new token.

With a KV-event publisher the prompt is tokenised (`common.kv_block_hash.sim_token_ids`) and its
blocks hashed the way vLLM's `sha256_cbor` does, and every step that stored or evicted blocks is
published as one batch, so a gateway can rebuild the cache's contents exactly.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import random
import time
from collections import deque
from collections.abc import Iterable
from typing import Any

from common.errors import OpenAIError, bad_request, not_found_model, unavailable
from common.kv_block_hash import BlockHasher, sim_token_ids
from common.kv_events import AllBlocksCleared
from common.tokens import CHARS_PER_TOKEN, count_tokens
from modelsim.kv_cache import KVCache, prompt_block_hashes
from modelsim.kv_events import KVEventPublisher
from modelsim.lora_slots import LoraSlots
from modelsim.profiles import HardwareProfile
from modelsim.request import SimRequest, Status
from modelsim.stats import EngineStats

log = logging.getLogger("modelsim.engine")

Batch = list[tuple[SimRequest, int]]
MAX_CATCH_UP_S = 0.05  # how far behind the step clock may fall before it resynchronises


def _now() -> float:
    """The event loop's clock (monotonic), also when called from outside a running loop."""
    try:
        return asyncio.get_running_loop().time()
    except RuntimeError:
        return time.monotonic()


class Engine:
    def __init__(
        self,
        profile: HardwareProfile,
        model: str,
        adapters: dict[str, str] | None = None,
        preload_adapters: Iterable[str] = (),
        max_lora: int = 4,
        seed: int = 0,
        time_scale: float = 1.0,
        enable_prefix_caching: bool = True,
        tag: str = "0",
        kv_publisher: KVEventPublisher | None = None,
        prefix_hash_seed: str = "0",
    ) -> None:
        if time_scale <= 0:
            raise ValueError("time_scale must be > 0")
        self.profile = profile
        self.model = model
        self.seed = seed
        self.time_scale = time_scale
        self.enable_prefix_caching = enable_prefix_caching
        self.tag = tag
        self._spec_adapters = dict(adapters or {})
        self._spec_preload = [a for a in preload_adapters]
        self.max_lora = max_lora
        self.slow_factor = 1.0  # set by the `slow` fault
        self._task: asyncio.Task[None] | None = None
        self._wake: asyncio.Event | None = None
        self.stopped = False
        self.kv_publisher = kv_publisher
        self._hasher = BlockHasher(profile.block_size, prefix_hash_seed) if kv_publisher is not None else None
        self._lora_ids: dict[str, int] = {}  # adapter → vLLM-style lora_int_id in BlockStored events
        self._init_state()

    def _init_state(self) -> None:
        """Everything a process restart loses."""
        p = self.profile
        self.rng = random.Random(self.seed)
        if self.kv_publisher is not None and hasattr(self, "kv"):
            self.kv_publisher.publish([AllBlocksCleared()])  # a restart forgets every block
        self.kv = KVCache(
            p.num_gpu_blocks,
            p.block_size,
            self.enable_prefix_caching,
            record_events=self.kv_publisher is not None,
            lora_ids=self._lora_ids,
        )
        self.lora = LoraSlots(self.max_lora, self._spec_adapters, self._spec_preload)
        for a in self._spec_preload:
            self.lora.known.setdefault(a, f"/adapters/{a}")
        self.waiting: deque[SimRequest] = deque()
        self.running: list[SimRequest] = []
        self.stats = EngineStats(max_model_len=p.max_model_len)
        self._counter = 0
        self.last_step_s = 0.0
        self.last_batch_tokens = 0

    # -- lifecycle ----------------------------------------------------------------------------
    def start(self) -> None:
        if self._task is None:
            self._wake = asyncio.Event()
            self._task = asyncio.get_running_loop().create_task(self._run(), name=f"sim-engine-{self.tag}")

    async def stop(self) -> None:
        self.stopped = True
        self.abort_all()
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None

    def reset(self) -> None:
        """A crash: in-flight requests die, caches and counters start empty (spec adapters only)."""
        self.abort_all(record=False)
        self._init_state()

    # -- model names --------------------------------------------------------------------------
    def resolve_model(self, name: str) -> str | None:
        """The LoRA adapter a model name selects (None = the base model); 404 if not served."""
        if name == self.model:
            return None
        if name in self.lora.known:
            return name
        raise not_found_model(name)

    # -- requests -----------------------------------------------------------------------------
    def submit(self, prompt_text: str, max_tokens: int | None, lora: str | None) -> SimRequest:
        if self.stopped:
            raise unavailable("The engine is shutting down", code="engine_stopped")
        p = self.profile
        prompt_tokens = count_tokens(prompt_text)
        if prompt_tokens == 0:
            raise bad_request("The prompt is empty", param="prompt")
        if prompt_tokens + (max_tokens or 0) > p.max_model_len or prompt_tokens >= p.max_model_len:
            raise OpenAIError(
                400,
                f"This model's maximum context length is {p.max_model_len} tokens. However, you "
                f"requested {prompt_tokens + (max_tokens or 0)} tokens ({prompt_tokens} in the "
                f"messages, {max_tokens or 0} in the completion). Please reduce the length of the "
                "messages or completion.",
                param="max_tokens" if max_tokens else "messages",
                code="context_length_exceeded",
            )
        if max_tokens is not None:
            out, reason = max_tokens, "length"
        else:
            out, reason = self._sample_output_len(), "stop"
            room = p.max_model_len - prompt_tokens
            if out >= room:
                out, reason = room, "length"
        self._counter += 1
        loop = asyncio.get_running_loop()
        token_ids: list[int] = []
        if not self.enable_prefix_caching:
            hashes: list[int] = []
        elif self._hasher is not None:
            token_ids = sim_token_ids(prompt_text)
            hashes = self._hasher.hashes(token_ids, lora)
            if lora:
                self._lora_ids.setdefault(lora, len(self._lora_ids) + 1)
        else:
            hashes = prompt_block_hashes(prompt_text, p.block_size, CHARS_PER_TOKEN, lora)
        req = SimRequest(
            rid=f"{self.tag}-{self._counter:x}",
            prompt_tokens=prompt_tokens,
            block_hashes=hashes,
            token_ids=token_ids,
            max_output=out,
            finish_on_limit=reason,
            lora=lora,
            arrival=loop.time(),
            max_tokens_param=max_tokens,
            seq=self._counter,
        )
        self.waiting.append(req)
        if self._wake is not None:
            self._wake.set()
        return req

    def _sample_output_len(self) -> int:
        p = self.profile
        n = int(self.rng.lognormvariate(math.log(p.output_len_median), p.output_len_sigma))
        return max(1, min(p.output_len_cap, n))

    def abort(self, req: SimRequest) -> None:
        """Client went away: free its slot and blocks now."""
        if req.status is Status.FINISHED:
            return
        if req.status is Status.WAITING:
            with contextlib.suppress(ValueError):
                self.waiting.remove(req)
        else:
            with contextlib.suppress(ValueError):
                self.running.remove(req)
            self.kv.free(req)
        self._finish(req, "abort", _now(), remove=False)

    def abort_all(self, record: bool = True) -> None:
        now = _now()
        reqs = list(self.waiting) + self.running
        self.waiting.clear()
        self.running = []
        for req in reqs:
            self.kv.free(req)
            if record:
                self._finish(req, "abort", now, remove=False)
            else:
                req.status = Status.FINISHED
                req.finish_reason = "abort"
                req.notify()

    # -- step loop ----------------------------------------------------------------------------
    async def _run(self) -> None:
        assert self._wake is not None
        loop = asyncio.get_running_loop()
        # The step clock runs on virtual time: a step starts when the previous one ended, even
        # if a busy event loop woke us a little late, so CPU contention from other pods or the
        # load generator does not silently lower the simulated GPU's throughput.
        step_end = loop.time()
        while True:
            if not self.running and not self.waiting:
                self._wake.clear()
                await self._wake.wait()
                step_end = loop.time()
                continue
            now = loop.time()
            t0 = step_end if now - step_end < MAX_CATCH_UP_S else now
            batch, loads = self._schedule(now)
            self.publish_kv_events()
            if not batch:  # nothing fits this instant (cannot last: max_model_len <= KV pool)
                self._wake.clear()
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._wake.wait(), 0.01)
                step_end = loop.time()
                continue
            duration = self._step_duration(batch, loads)
            self.last_step_s = duration
            self.stats.steps_total += 1
            self.stats.busy_seconds_total += duration
            step_end = t0 + duration
            await asyncio.sleep(max(0.0, step_end - loop.time()))
            self._apply(batch, loop.time())

    def publish_kv_events(self) -> None:
        """Publish what the cache stored or evicted since the last call (one batch, like a vLLM step)."""
        if self.kv_publisher is not None:
            self.kv_publisher.publish(self.kv.take_events())

    def _step_duration(self, batch: Batch, loads: int) -> float:
        tokens = 0
        context = 0
        for req, n in batch:
            tokens += n
            context += req.num_computed + n
        self.last_batch_tokens = tokens
        self.stats.iteration_tokens.observe(tokens)
        p = self.profile
        t = p.step_seconds(len(batch), tokens, context) + loads * p.lora_load_s
        return t * self.time_scale * self.slow_factor

    def _schedule(self, now: float) -> tuple[Batch, int]:
        p = self.profile
        kv = self.kv
        budget = p.max_num_batched_tokens
        batch: Batch = []
        running = self.running
        preempted = False
        i = 0
        while i < len(running) and budget > 0:
            req = running[i]
            n = min(req.num_tokens - req.num_computed, budget)
            if n <= 0:
                i += 1
                continue
            scheduled = True
            while not kv.grow(req, req.num_computed + n):
                victim = running.pop()  # the newest running request gives its blocks back
                self._preempt(victim)
                preempted = True
                if victim is req:
                    scheduled = False
                    break
            if not scheduled:
                break
            batch.append((req, n))
            budget -= n
            if req.lora:
                self.lora.touch(req.lora)
            i += 1

        loads = 0
        if preempted:
            return batch, loads
        active = {r.lora for r in running if r.lora}
        skipped: list[SimRequest] = []
        waiting = self.waiting
        bs = p.block_size
        while waiting and budget > 0 and len(running) < p.max_num_seqs:
            req = waiting[0]
            if req.lora and req.lora not in active and len(active) >= self.lora.max_lora:
                skipped.append(waiting.popleft())  # its adapter needs a slot the batch is using
                continue
            hit_blocks = kv.count_hits(req.block_hashes, (req.num_tokens - 1) // bs)
            start = hit_blocks * bs
            n = min(req.num_tokens - start, budget)
            if not kv.admit(req, hit_blocks, start + n):
                break  # FCFS: nothing behind it may jump the queue for KV space
            waiting.popleft()
            self.stats.prefix_queries_total += req.num_tokens
            self.stats.prefix_hits_total += start
            self.stats.version += 1
            if req.first_admitted is None:
                req.first_admitted = now
                req.cached_tokens = start
            req.num_computed = start
            req.status = Status.RUNNING
            running.append(req)
            if req.lora:
                if self.lora.ensure_resident(req.lora, active):
                    loads += 1
                active.add(req.lora)
            batch.append((req, n))
            budget -= n
        for req in reversed(skipped):
            waiting.appendleft(req)
        return batch, loads

    def _preempt(self, req: SimRequest) -> None:
        """Recompute-style preemption: drop its KV and requeue it at the head of the line."""
        self.kv.free(req)
        req.num_computed = 0
        req.status = Status.WAITING
        req.preemptions += 1
        self.stats.preemptions_total += 1
        self.stats.version += 1
        self.waiting.appendleft(req)

    def _apply(self, batch: Batch, now: float) -> None:
        st = self.stats
        finished = False
        generated = 0
        for req, n in batch:
            if req.status is not Status.RUNNING:
                continue  # aborted during the step
            req.num_computed += n
            if req.num_computed < req.num_tokens:
                continue  # a prefill chunk; more to come
            req.num_output += 1
            generated += 1
            if req.first_token_at is None:
                req.first_token_at = now
                st.ttft.observe(now - req.arrival)
                st.prompt_tokens_total += req.prompt_tokens
            elif req.last_token_at is not None:
                st.itl.observe(now - req.last_token_at)
            req.last_token_at = now
            if req.num_output >= req.max_output:
                self._finish(req, req.finish_on_limit, now, remove=False)
                finished = True
            else:
                req.notify()
        st.generation_tokens_total += generated
        st.version += 1
        if finished:
            for req, _ in batch:
                if req.status is Status.FINISHED and req.blocks:
                    self.kv.free(req)
            self.running = [r for r in self.running if r.status is Status.RUNNING]

    def _finish(self, req: SimRequest, reason: str, now: float, *, remove: bool) -> None:
        if remove:
            self.running.remove(req)
        req.status = Status.FINISHED
        req.finish_reason = reason
        req.finished_at = now
        st = self.stats
        st.success_by_reason[reason] = st.success_by_reason.get(reason, 0) + 1
        st.e2e.observe(now - req.arrival)
        if req.first_admitted is not None:
            st.queue_time.observe(req.first_admitted - req.arrival)
            st.inference_time.observe(now - req.first_admitted)
            if req.first_token_at is not None:
                st.prefill_time.observe(req.first_token_at - req.first_admitted)
                st.decode_time.observe(now - req.first_token_at)
        st.prompt_len.observe(req.prompt_tokens)
        st.generation_len.observe(req.num_output)
        if req.max_tokens_param is not None:
            st.max_tokens_param.observe(req.max_tokens_param)
        st.version += 1
        req.notify()

    # -- introspection ------------------------------------------------------------------------
    def running_adapters(self) -> list[str]:
        return list(dict.fromkeys(r.lora for r in self.running if r.lora))

    def waiting_adapters(self) -> list[str]:
        return list(dict.fromkeys(r.lora for r in self.waiting if r.lora))

    def snapshot(self) -> dict[str, Any]:
        p = self.profile
        st = self.stats
        return {
            "model": self.model,
            "profile": p.name,
            "time_scale": self.time_scale,
            "slow_factor": self.slow_factor,
            "num_requests_waiting": len(self.waiting),
            "num_requests_running": len(self.running),
            "kv_cache_usage": self.kv.usage(),
            "kv": {
                "block_size": p.block_size,
                "num_gpu_blocks": self.kv.num_blocks,
                "used_blocks": self.kv.num_used,
                "free_blocks": self.kv.num_free,
                "cached_blocks": self.kv.num_cached,
                "evictions": self.kv.evictions,
            },
            "max_num_seqs": p.max_num_seqs,
            "max_num_batched_tokens": p.max_num_batched_tokens,
            "max_model_len": p.max_model_len,
            "lora": {
                "max_lora": self.lora.max_lora,
                "known": sorted(self.lora.known),
                "resident": list(self.lora.resident),
                "running": self.running_adapters(),
                "waiting": self.waiting_adapters(),
                "loads_total": self.lora.loads_total,
                "evictions_total": self.lora.evictions_total,
            },
            "counters": {
                "prompt_tokens_total": st.prompt_tokens_total,
                "generation_tokens_total": st.generation_tokens_total,
                "request_success_total": dict(st.success_by_reason),
                "prefix_cache_queries_total": st.prefix_queries_total,
                "prefix_cache_hits_total": st.prefix_hits_total,
                "preemptions_total": st.preemptions_total,
                "steps_total": st.steps_total,
                "busy_seconds_total": st.busy_seconds_total,
            },
            "last_step_s": self.last_step_s,
            "running": [
                {
                    "id": r.rid,
                    "prompt_tokens": r.prompt_tokens,
                    "computed": r.num_computed,
                    "output": r.num_output,
                    "max_output": r.max_output,
                    "cached_tokens": r.cached_tokens,
                    "lora": r.lora,
                    "preemptions": r.preemptions,
                }
                for r in self.running
            ],
            "waiting": [
                {"id": r.rid, "prompt_tokens": r.prompt_tokens, "lora": r.lora} for r in self.waiting
            ],
        }
