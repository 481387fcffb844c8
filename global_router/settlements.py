"""What a replica still owes Redis per tenant, sent with the tenant's next admission.

Completing a request used to cost a second Redis round trip (reconcile tokens, free the lease).
Instead it is recorded here and rides on the same tenant's next `admit` (admit.lua settles first),
or, for a tenant that went quiet, on a background flush after `max_age_s`. Admissions made on the
local fallback while Redis was unreachable are recorded here too and charged to the shared limits
once Redis answers again, so an outage does not grant the same minute's budget twice.

A settlement whose call failed may or may not have been applied. Re-sending it is safe only where
a double application errs on the strict side: charges (requests, extra tokens) and lease releases
(idempotent) are kept for the next try, refunds are dropped — a refund lost costs the tenant a few
tokens for a minute; one applied twice would over-admit.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field

from common.config.router import Tenant


@dataclass(slots=True)
class Owed:
    tenant: Tenant
    requests: int = 0  # admissions made on the fallback, to charge (< 0: grants given back)
    tokens: int = 0  # token delta: > 0 charge, < 0 refund
    leases: list[str] = field(default_factory=list)  # concurrency leases to free
    since: float = 0.0  # when the oldest part was recorded

    def empty(self) -> bool:
        return not (self.requests or self.tokens or self.leases)

    def args(self) -> list[int | str]:
        return [self.requests, self.tokens, *self.leases]


class Settlements:
    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._owed: dict[str, Owed] = {}

    def add(self, tenant: Tenant, *, requests: int = 0, tokens: int = 0, lease: str = "") -> None:
        o = self._owed.get(tenant.name)
        if o is None:
            o = self._owed[tenant.name] = Owed(tenant, since=self._clock())
        o.requests += requests
        o.tokens += tokens
        if lease:
            o.leases.append(lease)

    def take(self, tenant_name: str) -> Owed | None:
        o = self._owed.pop(tenant_name, None)
        return None if o is None or o.empty() else o

    def due(self, max_age_s: float) -> list[Owed]:
        """Take every settlement older than `max_age_s` (for the background flush)."""
        edge = self._clock() - max_age_s
        names = [n for n, o in self._owed.items() if o.since <= edge]
        return [o for n in names if not (o := self._owed.pop(n)).empty()]

    def restore(self, o: Owed) -> None:
        """Put back a settlement whose call failed: charges and releases only (see module doc)."""
        self.add(o.tenant, requests=max(0, o.requests), tokens=max(0, o.tokens))
        for lease in o.leases:
            self.add(o.tenant, lease=lease)

    def owes_requests(self, tenant_name: str) -> bool:
        """Whether fallback admissions of this tenant are still to be charged to Redis."""
        o = self._owed.get(tenant_name)
        return o is not None and o.requests > 0

    def pending(self) -> int:
        return len(self._owed)
