"""What the gateway knows about LoRA adapters beyond the last scrape.

`AdapterMemory`: which adapters this gateway recently sent to which pod. The engine reports an
adapter as running only while a request uses it, and only at the next scrape. Between scrapes (and
shortly after a request ends, while the adapter is still in the GPU's LoRA slots) the gateway's own
memory is the better signal: keeping an adapter's burst on the pod that just loaded it avoids loading
it on a second pod and evicting something there. The `lora` scorer owns one.

`AdapterEvidence`: whether a model name is an adapter according to the engines' LoRA gauges, for
pools whose `/v1/models` lists do not tell adapters apart. One per scheduler, shared by every plugin
through the decision's context.
"""

from __future__ import annotations

from cluster_gateway.pool import PodState

EVIDENCE_TTL_S = 0.05  # how long a "is this model an adapter?" verdict is reused


class AdapterEvidence:
    """model → (time, verdict) of the last scan of the engines' LoRA gauges."""

    def __init__(self) -> None:
        self._verdicts: dict[str, tuple[float, bool]] = {}

    def engine_reports_adapter(self, model: str, pods: list[PodState], now: float) -> bool:
        """Whether any engine among `pods` reports `model` as a LoRA adapter (running or waiting).

        The fallback for pools where some pod's `/v1/models` did not say which names are adapters
        (the pool catalog decides otherwise). The verdict is reused for `EVIDENCE_TTL_S` rather than
        rescanned on every decision.
        """
        hit = self._verdicts.get(model)
        if hit is not None and now - hit[0] <= EVIDENCE_TTL_S:
            return hit[1]
        found = False
        for p in pods:
            m = p.metrics
            if m is not None and m.max_lora and (model in m.running_adapters or model in m.waiting_adapters):
                found = True
                break
        if len(self._verdicts) > 4096:
            self._verdicts.clear()
        self._verdicts[model] = (now, found)
        return found


PLACEMENT_TTL_S = 0.05  # how long an adapter → pods map built from the scrapes is reused


class AdapterPlacement:
    """adapter → pods whose last scrape shows it running or waiting, for two-stage picks.

    Kept up to date from the scrapes: at most every `ttl_s` (shorter than a scrape interval) an
    identity check per pod finds the pods with a new sample, and only their adapters are re-indexed,
    so a decision finds the pods holding its adapter without a pass over the pool. One check covers
    at most `chunk` pods (the next ones in turn), so no single decision pays for a 5,000-pod pool;
    there the placement is a few checks (a few hundred ms) behind the scrapes."""

    def __init__(self, ttl_s: float = PLACEMENT_TTL_S, chunk: int = 1024) -> None:
        self.ttl_s = ttl_s
        self.chunk = chunk
        self._cursor = 0
        self._checked_at = float("-inf")
        self._by_adapter: dict[str, dict[str, None]] = {}
        self._seen: dict[str, tuple[object, frozenset[str]]] = {}  # pod → (metrics indexed, adapters)

    def pods_with(self, adapter: str, pods: list[PodState], now: float) -> list[str]:
        if now - self._checked_at > self.ttl_s or now < self._checked_at:
            self._refresh(pods)
            self._checked_at = now
        held = self._by_adapter.get(adapter)
        return list(held) if held else []

    def _refresh(self, pods: list[PodState]) -> None:
        seen = self._seen
        by = self._by_adapter
        empty: frozenset[str] = frozenset()
        n = len(pods)
        if n > self.chunk:
            start = self._cursor % n
            self._cursor = start + self.chunk
            pods = pods[start : start + self.chunk] + pods[: max(0, start + self.chunk - n)]
        for p in pods:
            m = p.metrics
            name = p.endpoint.name
            prev = seen.get(name)
            if prev is not None and prev[0] is m:
                continue  # no new sample since the last check
            if m is None or not m.max_lora:
                now_held = empty
            else:
                now_held = (
                    m.running_adapters | m.waiting_adapters if m.waiting_adapters else m.running_adapters
                )
            was = prev[1] if prev is not None else empty
            if now_held != was:
                for a in was - now_held:
                    self._drop(a, name)
                for a in now_held - was:
                    by.setdefault(a, {})[name] = None
            seen[name] = (m, now_held)

    def _drop(self, adapter: str, name: str) -> None:
        held = self._by_adapter.get(adapter)
        if held is not None:
            held.pop(name, None)
            if not held:
                del self._by_adapter[adapter]

    def retain_pods(self, names: set[str]) -> None:
        for name in [n for n in self._seen if n not in names]:
            for a in self._seen.pop(name)[1]:
                self._drop(a, name)


class AdapterMemory:
    """pod → adapter → monotonic time of the last dispatch; entries expire after `ttl_s`.

    Also kept by adapter (adapter → pod → time), so the pods an adapter was just sent to are found
    without a pass over every pod."""

    def __init__(self, ttl_s: float = 2.0, max_per_pod: int = 64) -> None:
        self.ttl_s = ttl_s
        self.max_per_pod = max_per_pod
        self._seen: dict[str, dict[str, float]] = {}
        self._by_adapter: dict[str, dict[str, float]] = {}

    def record(self, pod_name: str, adapter: str, now: float) -> None:
        per_pod = self._seen.setdefault(pod_name, {})
        per_pod.pop(adapter, None)
        per_pod[adapter] = now
        self._by_adapter.setdefault(adapter, {})[pod_name] = now
        if len(per_pod) > self.max_per_pod:
            old = next(iter(per_pod))  # the least recently dispatched
            del per_pod[old]
            self._forget(old, pod_name)

    def _forget(self, adapter: str, pod_name: str) -> None:
        pods = self._by_adapter.get(adapter)
        if pods is not None:
            pods.pop(pod_name, None)
            if not pods:
                del self._by_adapter[adapter]

    def recent_pods(self, adapter: str, now: float) -> list[str]:
        """Pods this adapter was sent to within `ttl_s` (expired entries are dropped on the way)."""
        pods = self._by_adapter.get(adapter)
        if not pods:
            return []
        ttl = self.ttl_s
        expired = [n for n, t in pods.items() if now - t > ttl]
        for n in expired:
            del pods[n]
        return list(pods)

    def recent(self, pod_name: str, adapter: str, now: float) -> bool:
        per_pod = self._seen.get(pod_name)
        if not per_pod:
            return False
        t = per_pod.get(adapter)
        return t is not None and now - t <= self.ttl_s

    def remove_pod(self, pod_name: str) -> None:
        for adapter in self._seen.pop(pod_name, {}):
            self._forget(adapter, pod_name)

    def retain_pods(self, names: set[str]) -> None:
        for name in [n for n in self._seen if n not in names]:
            self.remove_pod(name)
