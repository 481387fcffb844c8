"""One in-flight request inside the simulated engine, and how its consumer waits for tokens."""

from __future__ import annotations

import asyncio
import enum
from dataclasses import dataclass, field


class Status(enum.Enum):
    WAITING = "waiting"
    RUNNING = "running"
    FINISHED = "finished"


@dataclass(slots=True, eq=False)
class SimRequest:
    rid: str
    prompt_tokens: int
    block_hashes: list[int]
    max_output: int
    finish_on_limit: str  # "length" when the client's max_tokens ends it, else "stop" (EOS)
    lora: str | None
    arrival: float
    max_tokens_param: int | None = None
    seq: int = 0  # arrival number on this pod: picks the deterministic filler text
    status: Status = Status.WAITING
    num_output: int = 0
    num_computed: int = 0
    blocks: list[int | None] = field(default_factory=list)
    token_ids: list[int] = field(default_factory=list)  # kept only when KV events are published
    cached_tokens: int = 0  # prefix-cache hit at first admission
    first_admitted: float | None = None
    first_token_at: float | None = None
    last_token_at: float | None = None
    finished_at: float | None = None
    finish_reason: str | None = None
    preemptions: int = 0
    _delivered: int = 0
    _waiter: asyncio.Future[None] | None = None

    @property
    def num_tokens(self) -> int:
        return self.prompt_tokens + self.num_output

    @property
    def finished(self) -> bool:
        return self.status is Status.FINISHED

    def notify(self) -> None:
        w = self._waiter
        if w is not None and not w.done():
            w.set_result(None)

    async def next_tokens(self) -> int:
        """Wait for new output tokens; returns how many arrived since the last call (0 = finished).

        Tokens that arrive while the consumer is busy writing are merged into one delta, as vLLM's
        output collector does for slow clients, so a backed-up stream never queues per token.
        """
        while self.num_output == self._delivered and not self.finished:
            self._waiter = asyncio.get_running_loop().create_future()
            try:
                await self._waiter
            finally:
                self._waiter = None
        n = self.num_output - self._delivered
        self._delivered = self.num_output
        return n

    async def wait_finished(self) -> None:
        while not self.finished:
            await self.next_tokens()
