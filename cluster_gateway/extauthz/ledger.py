"""Open picks of the ext_authz path, until Envoy's access log says how each request ended.

The ext_authz filter asks for a pod and then forgets the picker: no message reaches the picker when
the request ends. The pod's in-flight slot is therefore held here under a pick id that travels with
the request (`x-fleetgate-pick`, set by the check's answer) and comes back in Envoy's gRPC access
log, which releases it. An id names its owner (`<worker>.<seq>.<nonce>`), because the access log
stream lands on any serving process while only the one that picked holds the slot. The nonce (64
random bits) makes ids unguessable: a request Envoy answers itself (a denied check, the unchecked
`/v1/models` route) is logged with the client's own `x-fleetgate-pick`, which would otherwise
release another request's slot by naming its sequence number. A pick whose log entry
never arrives (Envoy restarted, the log stream broke) expires after `ttl_s`; the pod's scraped
running count still carries such a request's load.
"""

from __future__ import annotations

import itertools
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass

from cluster_gateway.pool import PodState
from cluster_gateway.request_path.dispatch import Pick
from common.nonces import Nonces

__all__ = ["OpenPick", "PickLedger", "owner"]

NONCE_BYTES = 8
NONCE_CHARS = 2 * NONCE_BYTES


@dataclass(slots=True)
class OpenPick:
    pick: Pick
    pod: PodState
    opened_at: float


def owner(pick_id: str) -> int | None:
    """The serving process that holds this pick's slot; None for an id this gateway never issued."""
    head, _, rest = pick_id.partition(".")
    seq, _, nonce = rest.partition(".")
    if not head.isdigit() or not seq.isdigit() or len(nonce) != NONCE_CHARS:
        return None
    return int(head)


class PickLedger:
    """Open picks of one serving process, oldest first (dicts keep insertion order)."""

    def __init__(self, worker: int, ttl_s: float, clock: Callable[[], float] = time.monotonic) -> None:
        self.worker = worker
        self.ttl_s = ttl_s
        self._clock = clock
        self._seq = itertools.count(1)
        self._open: dict[str, OpenPick] = {}
        self._nonce = Nonces(NONCE_BYTES)

    def __len__(self) -> int:
        return len(self._open)

    def __iter__(self) -> Iterator[str]:
        """The open pick ids, oldest first."""
        return iter(self._open)

    def open(self, pick: Pick, pod: PodState) -> str:
        pick_id = f"{self.worker}.{next(self._seq)}.{self._nonce()}"
        self._open[pick_id] = OpenPick(pick, pod, self._clock())
        return pick_id

    def close(self, pick_id: str) -> OpenPick | None:
        """The pick's request ended; None when it is unknown here or already closed (expired)."""
        return self._open.pop(pick_id, None)

    def expire(self) -> list[OpenPick]:
        """Close and return the picks older than `ttl_s`."""
        cutoff = self._clock() - self.ttl_s
        out: list[OpenPick] = []
        for entry in self._open.values():
            if entry.opened_at > cutoff:
                break
            out.append(entry)
        for _ in out:
            del self._open[next(iter(self._open))]
        return out
