"""Route an access-log release to the serving process that holds the pick's slot.

Envoy's access-log stream reaches whichever process the kernel gave its connection to, while the
pick's slot lives in the process that answered the check. A release for another process waits in
`outbox` and rides the pool feed (`cluster_gateway/workers/feed.py`): a worker's report carries it
to the gateway process, which hands it to the owner in that worker's next snapshot (≤ 2 feed ticks,
50 ms, on top of Envoy's log flush interval).
"""

from __future__ import annotations

from collections.abc import Callable

from cluster_gateway.extauthz.ledger import owner

Release = tuple[str, int]  # (pick id, HTTP status; 0 = no response)


class ReleaseRouter:
    def __init__(self, worker: int, local: Callable[[str, int], bool]) -> None:
        self.worker = worker
        self._local = local
        self.outbox: list[Release] = []

    def route(self, pick_id: str, status: int) -> None:
        o = owner(pick_id)
        if o is None:
            return  # not one of ours (a forged or foreign header): nothing to release
        if o == self.worker:
            self._local(pick_id, status)
        else:
            self.outbox.append((pick_id, status))

    def drain(self) -> list[Release]:
        out, self.outbox = self.outbox, []
        return out
