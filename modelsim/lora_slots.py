"""GPU LoRA slots: `max_lora` adapters resident at once, LRU-evicted when idle.

As in vLLM, the scheduler admits a request only while the batch uses at most `max_lora` distinct
adapters; an adapter the batch needs that is not resident is loaded into a slot (evicting the
least recently used adapter no running request uses), and the load time stalls that step.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Iterable


class LoraSlots:
    def __init__(self, max_lora: int, known: dict[str, str], preload: Iterable[str]) -> None:
        self.max_lora = max_lora
        self.known: dict[str, str] = dict(known)  # adapter name -> path
        self.resident: OrderedDict[str, None] = OrderedDict()  # LRU first
        self.loads_total = 0
        self.evictions_total = 0
        for name in preload:
            if len(self.resident) < max_lora:
                self.resident[name] = None

    def is_resident(self, name: str) -> bool:
        return name in self.resident

    def touch(self, name: str) -> None:
        if name in self.resident:
            self.resident.move_to_end(name)

    def ensure_resident(self, name: str, active: set[str]) -> bool:
        """Make `name` resident; True if that needed a load (the caller charges the load time)."""
        if name in self.resident:
            self.resident.move_to_end(name)
            return False
        if len(self.resident) >= self.max_lora:
            victim = next((a for a in self.resident if a not in active), None)
            if victim is None:
                raise RuntimeError("no idle LoRA slot to evict")  # the scheduler prevents this
            del self.resident[victim]
            self.evictions_total += 1
        self.resident[name] = None
        self.loads_total += 1
        return True

    def add(self, name: str, path: str) -> None:
        """Register an adapter (vLLM's load_lora_adapter); it becomes resident if a slot is free."""
        self.known[name] = path
        if len(self.resident) < self.max_lora and name not in self.resident:
            self.resident[name] = None
            self.loads_total += 1

    def remove(self, name: str) -> None:
        self.known.pop(name, None)
        self.resident.pop(name, None)
