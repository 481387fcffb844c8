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


class AdapterMemory:
    """pod → adapter → monotonic time of the last dispatch; entries expire after `ttl_s`."""

    def __init__(self, ttl_s: float = 2.0, max_per_pod: int = 64) -> None:
        self.ttl_s = ttl_s
        self.max_per_pod = max_per_pod
        self._seen: dict[str, dict[str, float]] = {}

    def record(self, pod_name: str, adapter: str, now: float) -> None:
        per_pod = self._seen.setdefault(pod_name, {})
        per_pod.pop(adapter, None)
        per_pod[adapter] = now
        if len(per_pod) > self.max_per_pod:
            del per_pod[next(iter(per_pod))]  # the least recently dispatched

    def recent(self, pod_name: str, adapter: str, now: float) -> bool:
        per_pod = self._seen.get(pod_name)
        if not per_pod:
            return False
        t = per_pod.get(adapter)
        return t is not None and now - t <= self.ttl_s

    def remove_pod(self, pod_name: str) -> None:
        self._seen.pop(pod_name, None)

    def retain_pods(self, names: set[str]) -> None:
        for name in [n for n in self._seen if n not in names]:
            del self._seen[name]
